"""What a sleeping trio task waits on, read from its await frames: a primitive and the object
(an Event, a Lock, a channel), a source outside the run (I/O, a thread), or nothing known.

The primitives are recognised by the code objects of trio's public API (``trio.Event.wait``,
``trio.Lock.acquire``...), so a trio release that moves a file changes nothing, and one that
renames a method makes that wait ``UNKNOWN``, which the analysis treats as wakeable whenever
any code still runs: a miss, never a false alarm. tether's channels name themselves in the
task's ``custom_sleep_data``.
"""

from __future__ import annotations

import enum
import gc
import inspect
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import attrs
import trio

TRIO_DIR = os.path.dirname(trio.__file__)
"""Where trio's own code lives: its frames are never the line a report names."""
_TETHER = os.path.dirname(os.path.dirname(__file__))


class WaitKind(enum.Enum):
    """What a task waits on."""

    IO = "I/O"
    THREAD = "a thread"
    IDLE = "wait_all_tasks_blocked"
    SIGNAL = "a signal"
    EVENT = "an Event"
    LOCK = "a Lock"
    SEMAPHORE = "a Semaphore"
    CONDITION = "a Condition"
    LIMITER = "a CapacityLimiter"
    LOT = "a ParkingLot"
    MEMORY_RECEIVE = "a memory channel (receive)"
    MEMORY_SEND = "a memory channel (send)"
    TETHER_RECEIVE = "a tether channel (receive)"
    TETHER_SEND = "a tether channel (send)"
    ANYIO_RECEIVE = "an anyio memory object stream (receive)"
    ANYIO_SEND = "an anyio memory object stream (send)"
    NURSERY = "its nursery's children"
    SLEEP = "sleep"
    UNKNOWN = "something the detector does not know"

    @property
    def external(self) -> bool:
        """Woken from outside the run's tasks: such a task always counts as running."""
        return self in _EXTERNAL


_EXTERNAL = frozenset({WaitKind.IO, WaitKind.THREAD, WaitKind.IDLE, WaitKind.SIGNAL})


@attrs.frozen(eq=False)
class Wait:
    """One task's wait: its kind, the object (or ``None``) and the innermost user frame."""

    kind: WaitKind
    obj: Any
    frame: types.FrameType | None


def _code(fn: Any) -> types.CodeType | None:
    try:
        code = inspect.unwrap(fn).__code__
    except AttributeError:
        return None
    return code if isinstance(code, types.CodeType) else None


def _codes() -> dict[types.CodeType, WaitKind]:
    found: dict[types.CodeType, WaitKind] = {}
    table: list[tuple[Any, WaitKind]] = [
        (trio.Event.wait, WaitKind.EVENT),
        (trio.Lock.acquire, WaitKind.LOCK),
        (trio.StrictFIFOLock.acquire, WaitKind.LOCK),
        (trio.Semaphore.acquire, WaitKind.SEMAPHORE),
        (trio.CapacityLimiter.acquire_on_behalf_of, WaitKind.LIMITER),
        (trio.Condition.wait, WaitKind.CONDITION),
        (trio.lowlevel.ParkingLot.park, WaitKind.LOT),
        (trio.MemoryReceiveChannel.receive, WaitKind.MEMORY_RECEIVE),
        (trio.MemorySendChannel.send, WaitKind.MEMORY_SEND),
        (trio.sleep_forever, WaitKind.SLEEP),
        (getattr(trio.Nursery, "_nested_child_finished", None), WaitKind.NURSERY),
        (getattr(sys.modules.get("trio.testing"), "wait_all_tasks_blocked", None), WaitKind.IDLE),
        (trio.to_thread.run_sync, WaitKind.THREAD),
        (getattr(trio.lowlevel, "wait_readable", None), WaitKind.IO),
        (getattr(trio.lowlevel, "wait_writable", None), WaitKind.IO),
    ]
    for fn, kind in table:
        code = _code(fn)
        if code is not None:
            found[code] = kind
    from .._worker import Worker

    code = _code(Worker.run)
    if code is not None:
        found[code] = WaitKind.THREAD
    return found


_CODES: dict[types.CodeType, WaitKind] = {}


def _known() -> dict[types.CodeType, WaitKind]:
    """The primitives' code objects, found at the first question (trio and tether loaded), and
    again once ``trio.testing`` is: only then can a task wait in it, and importing it here
    cost every harness's start pytest's import (issue 43: 0.1 s of CPU a process)."""
    if not _CODES or ("trio.testing" in sys.modules and WaitKind.IDLE not in _CODES.values()):
        _CODES.update(_codes())
    return _CODES


def _anyio_codes() -> dict[types.CodeType, WaitKind]:
    """anyio's memory object streams' waits (they wait on an anyio Event inside), once anyio's
    streams are imported: a program that never imports them is never asked to."""
    memory = sys.modules.get("anyio.streams.memory")
    found: dict[types.CodeType, WaitKind] = {}
    for name, method, kind in (
        ("MemoryObjectReceiveStream", "receive", WaitKind.ANYIO_RECEIVE),
        ("MemoryObjectSendStream", "send", WaitKind.ANYIO_SEND),
    ):
        code = _code(getattr(getattr(memory, name, None), method, None))
        if code is not None:
            found[code] = kind
    return found


_ANYIO_CODES: dict[types.CodeType, WaitKind] = {}
_BY_PATH = (
    (os.path.join(TRIO_DIR, "_core", "_io_"), WaitKind.IO),
    (os.path.join(TRIO_DIR, "_threads.py"), WaitKind.THREAD),
    (os.path.join(TRIO_DIR, "_signals.py"), WaitKind.SIGNAL),
)
_AGEN_STEPS = frozenset({"async_generator_asend", "async_generator_athrow"})
"""What awaiting an async generator's ``__anext__``/``asend``/``athrow`` awaits: an object
with no frame, whose only way to its generator is the garbage collector's referents."""
_OUTWARD = frozenset({WaitKind.LOT, WaitKind.SLEEP})
"""Kinds that trio's own primitives are built on: look further out for the primitive."""


def await_chain(task: trio.lowlevel.Task) -> Iterator[tuple[Any, types.FrameType]]:
    """Each coroutine or generator in the task's await chain (outermost first), with its
    frame: the objects whose locals the task holds."""
    obj: Any = task.coro
    while obj is not None:
        if type(obj).__name__ in _AGEN_STEPS:  # ``agen.asend()``: look inside its generator
            obj = next((o for o in gc.get_referents(obj) if inspect.isasyncgen(o)), None)
            continue
        frame = _frame(obj)
        if frame is None:
            return
        yield obj, frame
        obj = (
            getattr(obj, "cr_await", None)
            or getattr(obj, "gi_yieldfrom", None)
            or getattr(obj, "ag_await", None)
        )


def frame_of(obj: Any) -> types.FrameType:
    """The frame of a coroutine or generator of an await chain."""
    frame = _frame(obj)
    assert frame is not None
    return frame


def _frame(obj: Any) -> types.FrameType | None:
    """The frame of a coroutine, a generator or an async generator (``None``: none, or done)."""
    frame: types.FrameType | None = (
        getattr(obj, "cr_frame", None)
        or getattr(obj, "gi_frame", None)
        or getattr(obj, "ag_frame", None)
    )
    return frame


_WRAPPERS = ("anyio", "outcome", "pytest_trio", "_pytest", "pluggy", "sniffio")
"""Libraries whose frames stand between a test and trio (anyio's Event wraps trio's): a report
names the line of the test's code, not theirs."""


_DIRS: dict[tuple[object, ...], tuple[str, ...]] = {}


def library_dirs() -> tuple[str, ...]:
    """trio's, tether's and the wrappers' directories (those imported)."""
    modules = tuple(sys.modules.get(name) for name in _WRAPPERS)
    dirs = _DIRS.get(modules)
    if dirs is None:
        found = [TRIO_DIR, _TETHER]
        for module in modules:
            path = getattr(module, "__file__", None)
            if path:
                found.append(os.path.dirname(path) + os.sep)
        _DIRS.clear()  # one entry: the wrappers imported now
        dirs = _DIRS[modules] = tuple(found)
    return dirs


def user_frame(frames: list[types.FrameType]) -> types.FrameType | None:
    """The innermost frame outside trio, tether and the libraries that wrap them: the line a
    report names. A task of library code alone (started on ``lot.park``, or a ``from_thread``
    call of ``event.wait``) is named by the outermost public primitive it is in (trio's own
    trap, or ``outcome``'s wrapper, says nothing), else by its outermost frame."""
    libraries = library_dirs()
    for frame in reversed(frames):
        if not frame.f_code.co_filename.startswith(libraries):
            return frame
    known = _known()
    for frame in frames:
        if frame.f_code in known:
            return frame
    return frames[0] if frames else None


def classify(task: trio.lowlevel.Task, frames: list[types.FrameType]) -> Wait:
    """What ``task``, asleep, waits on."""
    known = _known()
    where = user_frame(frames)
    from ..channels._handles import SharedState

    data = task.custom_sleep_data
    if isinstance(data, SharedState):
        # A sender parked on a full buffer, or waiting for the receiver to close, is woken by
        # the receiving side; every other tether wait by the senders.
        sending = task in getattr(data, "send_tasks", ()) or task in getattr(
            data, "closed_waiters", ()
        )
        return Wait(WaitKind.TETHER_SEND if sending else WaitKind.TETHER_RECEIVE, data, where)
    if not _ANYIO_CODES and "anyio.streams.memory" in sys.modules:
        _ANYIO_CODES.update(_anyio_codes())
    for frame in reversed(frames):  # an anyio stream's Event is its business, not the wait
        kind = _ANYIO_CODES.get(frame.f_code)
        if kind is not None:
            return Wait(kind, frame.f_locals.get("self"), where)
    fallback: Wait | None = None
    for frame in reversed(frames):
        path = frame.f_code.co_filename
        kind = known.get(frame.f_code)
        if kind is None:
            kind = next((k for prefix, k in _BY_PATH if path.startswith(prefix)), None)
        if kind is None:
            if not path.startswith((TRIO_DIR, _TETHER)):
                break  # user code: no trio primitive is further out
            continue
        if kind.external:
            return Wait(kind, None, where)
        obj = frame.f_locals.get("self")
        if kind in _OUTWARD:
            fallback = fallback or Wait(kind, obj, where)
            continue
        return Wait(kind, obj, where)
    return fallback or Wait(WaitKind.UNKNOWN, None, where)


@attrs.frozen
class Scopes:
    """The cancel scopes that can wake a task: the enclosing ones up to the first shield."""

    scopes: tuple[trio.CancelScope, ...]
    cancelled: bool
    """Whether one of them is already cancelled: the task is being woken."""
    known: bool
    """Whether trio's layout let them be read; if not, any deadline counts for every task."""

    @property
    def deadline(self) -> float:
        return min((scope.deadline for scope in self.scopes), default=float("inf"))


def scopes(task: trio.lowlevel.Task) -> Scopes:
    """``task``'s cancel scopes, innermost first, stopping at the first shielded one."""
    status = getattr(task, "_cancel_status", None)
    if status is None or not hasattr(status, "_scope"):
        return Scopes((), False, False)
    found: list[trio.CancelScope] = []
    cancelled = bool(getattr(status, "effectively_cancelled", False))
    while status is not None:
        scope = status._scope
        found.append(scope)
        cancelled = cancelled or scope.cancel_called
        if scope.shield:
            break
        status = getattr(status, "_parent", None)
    return Scopes(tuple(found), cancelled, True)
