"""``Worker``: one thread that runs blocking calls in order, with a cheap hop to and from trio
(and, under asyncio, the loop's ``call_soon_threadsafe``).

``trio.to_thread.run_sync`` costs about 80 µs a call here (a thread cache, a cancel scope, a
limiter); a durable append or an SQLite commit costs 100 to 200 µs, so that hop alone would
make tether's journal and epoch store half as fast as the bare calls. A dedicated thread fed
by a ``SimpleQueue`` keeps every call of one file or database on one thread, in submission
order, and answers in one of two ways (ADR 0027):

- when the trio run has nothing else to do, the trio thread waits for the answer on a lock, for
  at most ``INLINE_WAIT``: the worker never waits for the GIL behind the run loop, and the
  answer needs no wake-up of the loop;
- otherwise, or once that bound is spent, the answer comes through ``TrioToken.run_sync_soon``.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import outcome
import trio

from . import _backend

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")

INLINE_WAIT = 0.002
"""Seconds the trio thread may block waiting for a call when no task is runnable: longer than
an fsync on a healthy disk, short enough that nothing that wakes meanwhile waits noticeably."""

_STOP = object()


class _Call(Generic[T]):
    """One submitted call, and how its answer reaches the caller."""

    __slots__ = ("args", "done", "fn", "guard", "result", "task", "token", "wake")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.result: outcome.Outcome[T] | None = None
        self.done = threading.Lock()
        self.done.acquire()
        self.guard = threading.Lock()
        """Orders the worker's answer against the caller's switch to waiting in trio."""
        self.task: trio.lowlevel.Task | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.wake: Callable[[], object] | None = None
        """Under asyncio: wakes the caller from the worker thread."""

    def answer(self) -> None:
        """Run the call (on the worker thread) and hand its outcome to the caller."""
        self.result = outcome.capture(self.fn, *self.args)
        with self.guard:
            task, token = self.task, self.token
            self.done.release()
        if task is not None and token is not None:
            token.run_sync_soon(trio.lowlevel.reschedule, task)
        elif self.wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                self.wake()

    def waiting_in_trio(self) -> bool:
        """Whether the caller must wait to be rescheduled (no answer yet); after this, the
        worker reschedules it."""
        with self.guard:
            if self.result is not None:
                return False
            self.task = trio.lowlevel.current_task()
            self.token = trio.lowlevel.current_trio_token()
            return True


class Worker:
    """A lazily started daemon thread running submitted calls one at a time."""

    def __init__(self, name: str, *, inline_wait: float = INLINE_WAIT) -> None:
        self.name = name
        self.inline_wait = inline_wait
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the worker thread and return (or raise) what it did.

        Not cancellable once submitted, like ``trio.to_thread.run_sync``: a write half done is
        worse than a write finished late. A cancellation is delivered when the call returns.
        Always a schedule point.
        """
        if not _backend.on_trio():
            return await self._run_asyncio(fn, args)
        await trio.lowlevel.checkpoint_if_cancelled()
        self._start()
        call = _Call(fn, args)
        self._jobs.put(call)
        if self._idle() and call.done.acquire(timeout=self.inline_wait):
            await trio.lowlevel.cancel_shielded_checkpoint()
        elif call.waiting_in_trio():
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
        assert call.result is not None
        return call.result.unwrap()

    async def _run_asyncio(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``run`` under asyncio: the answer comes through ``call_soon_threadsafe``, and a
        cancellation while the call runs is delivered at the caller's next await."""
        import asyncio

        await _backend.checkpoint_if_cancelled()
        self._start()
        loop = asyncio.get_running_loop()
        answered = loop.create_future()
        call = _Call(fn, args)
        call.wake = functools.partial(loop.call_soon_threadsafe, _settle, answered)
        self._jobs.put(call)
        await _backend.finish(lambda: asyncio.shield(answered))
        assert call.result is not None
        return call.result.unwrap()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()

    def _idle(self) -> bool:
        """Whether nothing in this run would be kept waiting by a blocked trio thread: no task
        queued to run, no call from another thread, no deadline within the wait."""
        if self.inline_wait <= 0:
            return False
        stats = trio.lowlevel.current_statistics()
        return (
            stats.tasks_runnable == 0
            and stats.run_sync_soon_queue_size == 0
            and stats.seconds_to_next_deadline > self.inline_wait
        )

    def _serve(self) -> None:
        while (call := self._jobs.get()) is not _STOP:
            call.answer()

    def stop(self) -> None:
        """Let the thread finish what was submitted, then exit. Idempotent."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread = None


def _settle(answered: asyncio.Future[None]) -> None:
    if not answered.done():
        answered.set_result(None)
