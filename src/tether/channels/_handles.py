"""Reference-counted strong senders, shared by every channel kind.

A channel's send half is open while at least one strong sender lives, as in Rust, where the
last ``Sender`` dropped closes the channel. Python has no deterministic drop for objects caught
in cycles and runs finalizers on whatever thread the garbage collector happens to run, so a
finalizer here never touches trio state itself. It hands the release to the run that last used
the channel through ``TrioToken.run_sync_soon``, which is thread-safe and re-entrant, and warns
with the handle's creation site. When that run is over no task can be parked on the channel, so
the release is plain bookkeeping on our own fields and touches nothing of trio's.

A channel binds to its loop at its first wait (``bind``): under trio it parks tasks with
``trio.lowlevel`` and takes a checkpoint per operation; under asyncio it parks them on
``_aiopark`` futures and, like ``asyncio.Queue``, suspends only to wait (ADR 0054).

Every live strong sender has a record (name, ``file:line``, creating task) in ``live``: the same
dict is the reference count and the answer to "who keeps this channel open?" (``holders()``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, Self

import attrs
import trio
from outcome import Error

from .. import _backend
from .._util import caller_site

if TYPE_CHECKING:
    from .. import _aiopark

_is_finalizing = sys.is_finalizing


@attrs.frozen
class Holder:
    """One live strong sender: who keeps a channel open, and where it came from."""

    name: str
    """The sender's name: the channel's, unless ``clone(name=...)`` gave it its own."""
    site: str
    """Where the handle was created (``channel()``, ``clone()``, ``move()``...): ``file:line``."""
    task: str | None
    """The name of the task (trio's or asyncio's) that created the handle; ``None`` outside
    one."""


def current_token() -> trio.lowlevel.TrioToken | None:
    """The running trio run's token, or ``None`` outside a run."""
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


def current_task_name() -> str | None:
    """The name of the running task (trio's or asyncio's), or ``None`` outside one."""
    try:
        return trio.lowlevel.current_task().name
    except RuntimeError:
        pass
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    return None if task is None else task.get_name()


@attrs.define(slots=True, eq=False, repr=False)
class SharedState:
    """What every channel kind keeps about its strong senders."""

    name: str | None
    live: dict[int, tuple[str, str, int, str | None]] = attrs.field(factory=dict)
    """One record ``(name, file, line, task)`` per live strong sender: the reference count.
    When it becomes empty the send half of the channel is closed and ``_last_sender_gone`` runs."""
    token: trio.lowlevel.TrioToken | _aiopark.Loop | None = attrs.field(factory=current_token)
    """The run that last parked a task on this channel (a trio token, or the asyncio loop):
    where finalizers send releases."""
    aio: _aiopark.Loop | Literal[False] | None = None
    """The loop this channel's tasks wait on: ``False`` for trio, the asyncio ``Loop``, or
    ``None`` until its first wait (``bind``)."""
    wake: Callable[..., None] = trio.lowlevel.reschedule
    """How a parked task is woken: ``trio.lowlevel.reschedule`` or ``_aiopark.reschedule``."""
    tx_reason: str | None = None
    """Why the senders closed, as the last ``close(reason=...)`` of a sender said."""
    _next_key: int = 0
    kind: ClassVar[str] = "channel"

    @property
    def label(self) -> str:
        """How messages name this channel: ``channel 'cmd'`` or ``an unnamed channel``."""
        return f"{self.kind} {self.name!r}" if self.name else f"an unnamed {self.kind}"

    @property
    def tag(self) -> str:
        """How reprs name this channel: `` 'cmd'`` or nothing."""
        return f" {self.name!r}" if self.name else ""

    def bind(self) -> _aiopark.Loop | Literal[False]:
        """Bind to the loop of the running task, at the channel's first wait."""
        if _backend.on_trio():
            self.aio = False
        else:
            from .. import _aiopark

            self.aio = self.token = _aiopark.bind()
            self.wake = _aiopark.reschedule
        return self.aio

    def wake_all(
        self, waiters: dict[Any, Any], error: Callable[[], BaseException] | None = None
    ) -> None:
        """Wake every parked task, oldest first, with ``None`` or raising a fresh ``error()``."""
        wake = self.wake
        while waiters:
            task = next(iter(waiters))
            del waiters[task]
            if error is None:
                wake(task)
            else:
                wake(task, Error(error()))

    def acquire(self, name: str | None, depth: int) -> int:
        """Register a new strong sender created ``depth`` frames above the caller; its key."""
        key = self._next_key
        self._next_key = key + 1
        filename, line = caller_site(depth + 1)
        self.live[key] = (name or self.name or "sender", filename, line, current_task_name())
        return key

    def release(self, key: int) -> None:
        """Forget one strong sender; the last one closes the send half. Never raises."""
        if self.live.pop(key, None) is not None and not self.live:
            self._last_sender_gone()

    def _last_sender_gone(self) -> None:
        """Wake whoever waits for values that can no longer come."""

    def holders(self) -> tuple[Holder, ...]:
        """The live strong senders, oldest first."""
        return tuple(
            Holder(name, f"{filename}:{line}", task)
            for name, filename, line, task in self.live.values()
        )

    def site_of(self, key: int) -> str:
        """``name at file:line`` of a live sender, for messages."""
        record = self.live.get(key)
        if record is None:
            return "a sender"
        name, filename, line, _ = record
        return f"sender {name!r} created at {filename}:{line}"

    def call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in the run that owns this channel; safe from any thread."""
        token = self.token or current_token()
        if token is not None:
            try:
                token.run_sync_soon(fn, *args)
            except RuntimeError:  # the run is over (trio's RunFinishedError is one)
                pass
            else:
                return
        # No run is alive, so no task is parked here: the release is bookkeeping only.
        fn(*args)


class Closeable:
    """``with``, ``async with`` and ``aclose()`` for an endpoint with a synchronous ``close()``."""

    __slots__ = ()

    def close(self, reason: str | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def aclose(self) -> None:
        """``close()``, then a checkpoint."""
        self.close()
        await _backend.checkpoint()


class StrongHandle(Closeable):
    """Base of every sender that keeps its channel open: close, move and the drop finalizer."""

    __slots__ = ("_key", "_moved_at", "_shared")

    _shared: SharedState
    _key: int | None
    """This handle's entry in ``_shared.live``; ``None`` once it is closed or moved."""
    _moved_at: str | None

    def _register(self, shared: SharedState, name: str | None, depth: int) -> None:
        self._shared = shared
        self._moved_at = None
        self._key = shared.acquire(name, depth + 1)

    def _unusable(self) -> NoReturn:
        if self._moved_at is not None:
            raise RuntimeError(
                f"this sender was moved at {self._moved_at}; use the handle move() returned"
            )
        raise trio.ClosedResourceError("this sender was closed")

    def _take_key(self, depth: int) -> int:
        """Retire this handle for ``move()``; the caller registers the new handle first."""
        key = self._key
        if key is None:
            self._unusable()
        filename, line = caller_site(depth + 1)
        self._moved_at = f"{filename}:{line}"
        self._key = None
        return key

    def _closing(self) -> None:
        """Hook: the handle is about to release its reference (wake its own parked tasks)."""

    @trio.lowlevel.enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Drop this handle's reference; the last strong sender closed closes the channel.

        ``reason`` (``"superseded by epoch 8"``) is what the receiver's ``ChannelClosed.reason``
        says once the channel is closed. Idempotent, not a checkpoint, and a no-op on a handle
        that was moved.
        """
        key = self._key
        if key is None:
            return
        if reason is not None:
            self._shared.tx_reason = reason
        self._closing()
        self._key = None
        self._shared.release(key)

    def __del__(self) -> None:
        key = getattr(self, "_key", None)
        if key is None or _is_finalizing():
            return
        self._key = None
        shared = self._shared
        where = shared.site_of(key)
        shared.call_soon(shared.release, key)
        warnings.warn(
            f"{where} was dropped without close(); its finalizer closed it",
            ResourceWarning,
            stacklevel=1,
        )


async def park(waiters: dict[Any, None], shared: SharedState) -> Any:
    """Park the current task in ``waiters`` until someone wakes it; cancel-safe.

    ``custom_sleep_data`` names the channel, so a deadlock report can say what a task waits on.
    """
    aio = shared.aio
    if aio is None:
        aio = shared.bind()
    if aio:
        return await aio.park(waiters, None, shared)
    task = trio.lowlevel.current_task()
    waiters[task] = None
    task.custom_sleep_data = shared
    shared.token = trio.lowlevel.current_trio_token()

    def abort(_: object) -> trio.lowlevel.Abort:
        del waiters[task]
        return trio.lowlevel.Abort.SUCCEEDED

    return await trio.lowlevel.wait_task_rescheduled(abort)


async def checkpoint(shared: SharedState) -> None:
    """A checkpoint on trio; nothing under asyncio, whose queues do not suspend unless they
    wait."""
    aio = shared.aio
    if aio is None:
        aio = shared.bind()
    if not aio:
        await trio.lowlevel.checkpoint()
