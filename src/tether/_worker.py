"""``Worker``: one thread that runs blocking calls in order, with a cheap hop to and from trio.

``trio.to_thread.run_sync`` costs about 80 µs a call here (a thread cache, a cancel scope, a
limiter); a durable append or an SQLite commit costs 150 to 200 µs, so that hop alone would
make tether's journal and epoch store half as fast as the bare calls. A dedicated thread fed
by a ``SimpleQueue`` that answers through ``TrioToken.run_sync_soon`` costs a fraction of it,
and it also keeps every call of one file or database on one thread, in submission order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

_STOP = object()


class Worker:
    """A lazily started daemon thread running submitted calls one at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the worker thread and return (or raise) what it did.

        Not cancellable once submitted, like ``trio.to_thread.run_sync``: a write half done is
        worse than a write finished late. A cancellation is delivered when the call returns.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()

        def job() -> None:
            result = outcome.capture(fn, *args)
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        self._jobs.put(job)
        return await trio.lowlevel.wait_task_rescheduled(  # type: ignore[no-any-return]
            lambda _: trio.lowlevel.Abort.FAILED
        )

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            job()

    def stop(self) -> None:
        """Let the thread finish what was submitted, then exit. Idempotent."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread = None
