"""The backend seam (ADR 0053): the one place that knows which loop runs. The shared layers
take their primitives from here (trio's own under trio, anyio's under asyncio) and what anyio
does not give alike on both loops: tasks that no task owns, work that a native asyncio
cancellation cannot cut short, a wait whose cancellation comes after it; ``_fdstream`` holds
the pipe as a stream. It imports nothing of tether's layers, trio only when trio runs and
asyncio only when asyncio runs.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, cast

import anyio
import anyio.lowlevel
import sniffio

if TYPE_CHECKING:  # asyncio is imported when it runs: a trio program never pays for it
    import asyncio

logger = logging.getLogger("tether")
T = TypeVar("T")


class Backend(enum.Enum):
    """The event loops tether runs on."""

    TRIO = "trio"
    ASYNCIO = "asyncio"


class UnsupportedBackend(RuntimeError):
    """tether was called from an event loop it does not run on (neither trio nor asyncio), or
    a part of it that runs on trio only (the etcd store) was called under asyncio."""


class ExitedInAnotherTask(RuntimeError):
    """An ``async with`` of tether's was exited by another task than the one that entered it
    (an async generator's finalizer, say). What it owns was still closed; the error names the
    mistake that anyio and asyncio report as a corrupt cancel scope stack."""


def current() -> Backend:
    """The loop running this task.

    Raises:
        UnsupportedBackend: no trio or asyncio loop runs it (or another library's does).
    """
    try:
        name = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        raise UnsupportedBackend("tether must be called from a trio or asyncio task") from None
    try:
        return Backend(name)
    except ValueError:
        raise UnsupportedBackend(f"tether runs on trio and asyncio, not {name}") from None


def _trio() -> Any:
    return sys.modules["trio"]  # imported by now: a trio run is going


def on_trio() -> bool:
    """Whether trio runs this task (else asyncio: anyio's primitives serve it)."""
    return sniffio.current_async_library() == "trio"


# Hot-path primitives: trio's own under trio (anyio's wrappers cost 1-2 µs each), else anyio's.


class Event(Protocol):
    """``trio.Event`` or ``anyio.Event``."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


class Scope(Protocol):
    """``trio.CancelScope`` or ``anyio.CancelScope``."""

    deadline: float
    shield: bool

    def cancel(self) -> None: ...

    @property
    def cancelled_caught(self) -> bool: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...  # fmt: skip


class TaskGroup(Protocol):
    """A trio nursery or an anyio task group, as entered."""

    @property
    def cancel_scope(self) -> Scope: ...

    def start_soon(
        self, fn: Callable[..., Awaitable[object]], *args: object, name: object = None
    ) -> None: ...


class Lock(Protocol):
    """``trio.Lock`` or ``anyio.Lock``."""

    def locked(self) -> bool: ...

    async def __aenter__(self) -> None: ...

    async def __aexit__(self, *exc: object) -> None: ...


def event() -> Event:
    return cast(Event, _trio().Event() if on_trio() else anyio.Event())


def lock() -> Lock:
    return cast(Lock, _trio().Lock() if on_trio() else anyio.Lock())


def cancel_scope(*, deadline: float = math.inf, shield: bool = False) -> Scope:
    if on_trio():
        return cast(Scope, _trio().CancelScope(deadline=deadline, shield=shield))
    return anyio.CancelScope(deadline=deadline, shield=shield)


def move_on_after(seconds: float) -> Scope:
    return cancel_scope(deadline=current_time() + seconds)


def task_group() -> contextlib.AbstractAsyncContextManager[TaskGroup]:
    opened = _trio().open_nursery() if on_trio() else anyio.create_task_group()
    return cast("contextlib.AbstractAsyncContextManager[TaskGroup]", opened)


def current_time() -> float:
    return cast(float, _trio().current_time()) if on_trio() else anyio.current_time()


async def sleep(seconds: float) -> None:
    await (_trio().sleep(seconds) if on_trio() else anyio.sleep(seconds))


async def checkpoint() -> None:
    await (_trio().lowlevel.checkpoint() if on_trio() else anyio.lowlevel.checkpoint())


async def checkpoint_if_cancelled() -> None:
    if on_trio():
        await _trio().lowlevel.checkpoint_if_cancelled()
    else:
        await anyio.lowlevel.checkpoint_if_cancelled()


async def cancel_shielded_checkpoint() -> None:
    if on_trio():
        await _trio().lowlevel.cancel_shielded_checkpoint()
    else:
        await anyio.lowlevel.cancel_shielded_checkpoint()


async def wait_readable(fd: int | socket.socket) -> None:
    """Until ``fd`` is readable; ``closed_errors()`` once another task closes it."""
    if on_trio():
        await _trio().lowlevel.wait_readable(fd)
    else:
        await anyio.wait_readable(fd)


async def wait_writable(fd: int | socket.socket) -> None:
    """Until ``fd`` is writable; ``closed_errors()`` once another task closes it."""
    if on_trio():
        await _trio().lowlevel.wait_writable(fd)
    else:
        await anyio.wait_writable(fd)


def task_id() -> int:
    """The running task's identity (to tell that a context is exited by another task)."""
    return anyio.get_current_task().id


_LOOSE: set[asyncio.Task[None]] = set()
"""The asyncio system tasks running now (the loop keeps only a weak reference to a task)."""
_HOOKS: dict[asyncio.AbstractEventLoop, AsyncIterator[None]] = {}
"""Per loop, the async generator that ends its system tasks when ``asyncio.run`` ends it."""


def spawn_system_task(fn: Callable[..., Awaitable[object]], *args: object, name: str) -> None:
    """Run ``fn(*args)`` beside the program, owned by no task, until it returns or the run
    ends: a trio system task (cancelled when the main task ends), or an asyncio task, which
    ``asyncio.run`` cancels at its end (one started as it ends, by another ending, too: see
    ``_hook``). Its exception is logged, never raised: on trio it would crash the run."""

    started = False

    async def guarded() -> None:
        nonlocal started
        started = True
        try:
            await fn(*args)
        except Exception:
            logger.exception("tether task %r failed", name)

    if current() is Backend.TRIO:
        import trio

        trio.lowlevel.spawn_system_task(guarded, name=name)
        return
    import asyncio

    loop = asyncio.get_running_loop()
    if loop not in _HOOKS:
        _hook(loop)

    def ended(task: asyncio.Task[None]) -> None:
        _LOOSE.discard(task)
        if task.cancelled() and not started and not loop.is_closed():
            # Cancelled before its first step (``asyncio.run`` ending as it was started), it
            # never ran, and nor did its ``finally`` blocks (a keeper's close): run it now, to
            # be cancelled at its first wait, as a trio system task would be.
            again = loop.create_task(guarded(), name=name)
            _LOOSE.add(again)
            again.add_done_callback(_LOOSE.discard)
            loop.call_soon(again.cancel)

    task = loop.create_task(guarded(), name=name)
    _LOOSE.add(task)
    task.add_done_callback(ended)


def _hook(loop: asyncio.AbstractEventLoop) -> None:
    """Have the loop's end cancel and await every system task of it, again until none is
    left. ``asyncio.run`` cancels the tasks it finds when its main task ends, but one started
    meanwhile (a keeper's reader, started by a replacement that the end cancelled) would be
    left pending, and its keeper running: the loop's shutdown of async generators, which
    comes next, runs this one's ``finally``."""
    import asyncio

    async def at_end() -> AsyncIterator[None]:
        try:
            yield
        finally:
            _HOOKS.pop(loop, None)
            while tasks := [t for t in _LOOSE if t.get_loop() is loop and not t.done()]:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    hook = _HOOKS[loop] = at_end()

    async def begin() -> None:
        await anext(hook)  # the loop keeps it from now on, and closes it at its end

    loop.create_task(begin(), name="tether loop end")


class Helpers:
    """The background tasks of one object that any task may close (a ``ChildGroup`` exited by
    an async generator's finalizer, say): each is a system task in a scope ``cancel`` ends,
    so no task's cancel scopes are held open across the caller's code."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self.cancelled = False

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object, name: str) -> None:
        """Run ``fn(*args)`` until it returns or ``cancel`` is called (not at all after)."""

        async def scoped() -> None:
            if self.cancelled:
                return
            with anyio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    await fn(*args)
                finally:
                    self._scopes.discard(scope)

        if not self.cancelled:
            spawn_system_task(scoped, name=name)

    def cancel(self) -> None:
        """End every task started, and start none from now on."""
        self.cancelled = True
        for scope in list(self._scopes):
            scope.cancel()


async def shielded(fn: Callable[[], Awaitable[T]]) -> T:
    """``await fn()`` to its end whatever cancels the caller meanwhile; then the cancellation
    goes on. On trio a shielded scope does it. On asyncio anyio's shield stops anyio's
    cancellation but not a native one (``task.cancel()``, ``asyncio.timeout``, a sibling's
    failure in an ``asyncio.TaskGroup``), so ``fn`` runs in a task of its own, awaited again
    after each cancellation of the caller."""
    if on_trio():
        with _trio().CancelScope(shield=True):
            return await fn()

    import asyncio

    work = asyncio.ensure_future(fn())
    cancelled = await _wait_out(work)
    result = work.result()
    if cancelled is not None:
        raise cancelled
    return result


async def _wait_out(work: asyncio.Future[T]) -> BaseException | None:
    """Under asyncio: wait for ``work`` to end through the caller's cancellations; the last."""
    import asyncio

    cancelled: BaseException | None = None
    while not work.done():
        try:
            await asyncio.wait((work,))  # cancelling the caller leaves the work running
        except asyncio.CancelledError as exc:
            cancelled = exc
    return cancelled


def notify_closing(fd: int) -> None:
    """Wake whichever task waits on ``fd`` (it gets ``anyio.ClosedResourceError``): call it
    before closing ``fd``. Nothing when no loop runs (a finalizer): none can be waiting."""
    with contextlib.suppress(sniffio.AsyncLibraryNotFoundError, RuntimeError):
        if on_trio():
            _trio().lowlevel.notify_closing(fd)
        else:
            anyio.notify_closing(fd)


async def finish(wait: Callable[[], Awaitable[T]]) -> T:
    """``await wait()`` to its end even if the caller is cancelled meanwhile; the cancellation
    is then delivered at its next checkpoint, as trio does for work that cannot be undone (a
    write being synced). ``wait`` must be safe to call again after a cancellation (a wait for a
    descriptor or for a future, say), as asyncio's native cancellation interrupts it."""
    if on_trio():
        with _trio().CancelScope(shield=True):
            return await wait()
    import asyncio

    caught: BaseException
    try:
        return await wait()
    except asyncio.CancelledError as exc:
        caught = exc
    # Again in a task of its own: anyio's cancellation is delivered on every turn of the loop,
    # and a wait retried in the cancelled task would lose each race with it.
    work = asyncio.ensure_future(wait())
    caught = await _wait_out(work) or caught
    result = work.result()
    task = asyncio.current_task()
    assert task is not None
    task.uncancel()
    task.cancel(caught.args[0] if caught.args else None)  # the same one, at the next await
    return result


def cancelled_class() -> type[BaseException]:
    """What a cancellation raises in this task: ``trio.Cancelled``, ``asyncio.CancelledError``."""
    if on_trio():
        return cast("type[BaseException]", _trio().Cancelled)
    import asyncio

    return asyncio.CancelledError


def closed_class() -> type[Exception]:
    """The error for using a closed resource on this loop: trio's, or anyio's."""
    found = _trio().ClosedResourceError if on_trio() else anyio.ClosedResourceError
    return cast("type[Exception]", found)


def closed_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a pipe stream raises once it (or its other end) is closed: anyio's, and
    trio's while trio is imported (its ``FdStream`` raises its own)."""
    found: tuple[type[BaseException], ...] = (
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
    )
    trio = sys.modules.get("trio")
    if trio is not None:
        found += (trio.ClosedResourceError, trio.BrokenResourceError)
    return found
