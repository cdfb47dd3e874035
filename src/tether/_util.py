"""Small helpers shared by every layer; imports nothing from tether."""

from __future__ import annotations

import abc
import inspect
import logging
import os
import sys
import time
from collections.abc import MutableMapping
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class NoPublicConstructor(abc.ABCMeta):
    """Metaclass for endpoints that only a factory may create (``channel()``, ``oneshot()``...).

    ``Cls(...)`` raises ``TypeError``; the implementation calls ``Cls._create(...)``.
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc,no-any-return]


def caller_site(depth: int) -> tuple[str, int]:
    """The ``(filename, line)`` of the frame ``depth`` levels above the caller of this function.

    One frame lookup, no traceback: cheap enough to run on every handle creation.
    """
    frame = sys._getframe(depth + 1)
    return frame.f_code.co_filename, frame.f_lineno


def boottime() -> float:
    """Seconds on a clock that keeps counting while the host is suspended (``CLOCK_BOOTTIME``
    on Linux; ``time.monotonic`` elsewhere, which may not), for deadlines that another host
    counts in real time, such as a lease's."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def reexport(namespace: MutableMapping[str, Any]) -> None:
    """Give every class and function a package lists in ``__all__`` that package as its
    ``__module__``, as trio does, so reprs, tracebacks and docs name ``tether.x.Name`` rather
    than the private module it lives in. Constants, instances and type aliases are left, and
    so are names another public package owns (``tether.harness`` lists ``tether.wire``'s
    ``Prompt``)."""
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        value = namespace.get(name)
        if inspect.isclass(value) or inspect.isfunction(value):
            owner = value.__module__
            if owner.startswith(f"{package}.") or owner.rpartition(".")[2].startswith("_"):
                value.__module__ = package


def write_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``pwrite`` may write less than asked): the
    transcript's appends and the epoch store's WAL reserve."""
    written = os.pwrite(fd, data, offset)
    if written == len(data):
        return
    view, offset = memoryview(data)[written:], offset + written
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class Throttle:
    """Say a repeated complaint once per ``every`` seconds on ``logger``, with how many were
    held back: a flood of one fault (a descriptor limit, hostile peers) is one line a minute,
    not a log that fills the disk."""

    def __init__(self, logger: logging.Logger, every: float = 60.0) -> None:
        self.logger = logger
        self.every = every
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -self.every) < self.every:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        suffix = f" ({held} more like it in the last {self.every:g}s)" if held else ""
        self.logger.warning(message + suffix, *args)


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``): after a
    burst of connections, what they freed is otherwise kept by the allocator for good.
    Whether it could (elsewhere than glibc it does nothing)."""
    import ctypes  # 2 ms of imports: not at start-up

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
