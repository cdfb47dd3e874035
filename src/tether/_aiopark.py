"""Parking an asyncio task on a tether channel the way trio parks one (ADR 0054): beside the
seam, imported only once a channel is used under asyncio.

trio parks a task with ``wait_task_rescheduled(abort)``: a cancellation calls ``abort`` at
once, which takes the task out of the channel's waiters, so no value is ever handed to a task
that will not take it. Here the task awaits a ``Parked`` future, the key it waits under in the
channel's waiter dict; ``Task.cancel()`` calls the future's ``cancel``, which takes it out of
the dict first. A task woken and then cancelled before it ran keeps what it was handed (a
value taken from a sender cannot go back) and gets the cancellation at its next await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

from outcome import Outcome


class Parked(asyncio.Future["Outcome[Any] | None"]):
    """One asyncio task parked on a channel: its key in the channel's waiter dict (where a
    trio ``Task`` is on trio) and the future it awaits. ``custom_sleep_data`` names what it
    waits on and ``task`` is the task, for the deadlock report, as on trio."""

    __slots__ = ("_waiters", "custom_sleep_data", "task")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, waiters: MutableMapping[Any, Any], data: object
    ) -> None:
        super().__init__(loop=loop)
        self._waiters = waiters
        self.custom_sleep_data = data
        self.task = asyncio.current_task()

    def cancel(self, msg: Any = None) -> bool:
        """Leave the channel's waiters before anyone can wake this task (trio's abort)."""
        if not self.done():
            self._waiters.pop(self, None)
        return super().cancel(msg)


def reschedule(parked: Parked, next_send: Outcome[Any] | None = None) -> None:
    """Wake a parked task with ``next_send``, ``None`` for ``Value(None)``
    (``trio.lowlevel.reschedule``'s signature)."""
    parked.set_result(next_send)


class Loop:
    """The asyncio loop a channel's tasks run on: where they park, and where a finalizer
    hands a release (a ``TrioToken``'s job on trio)."""

    __slots__ = ("loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run_sync_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` in the loop; safe from any thread. ``RuntimeError`` once the
        loop is closed (as trio's ``RunFinishedError`` is one)."""
        self.loop.call_soon_threadsafe(fn, *args)

    async def park(self, waiters: MutableMapping[Any, Any], entry: object, data: object) -> Any:
        """Wait in ``waiters`` (under a new key, beside ``entry``) until woken; return what
        the waker handed over, or raise what it raised."""
        parked = Parked(self.loop, waiters, data)
        waiters[parked] = entry
        try:
            woken = await parked
        except asyncio.CancelledError as exc:
            if parked.cancelled():
                raise
            # Woken, then cancelled before it ran: keep what it was handed, and have the
            # same cancellation come at the next await (asyncio.timeout counts on it).
            woken = parked.result()
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            task.cancel(exc.args[0] if exc.args else None)
        return None if woken is None else woken.unwrap()


def bind() -> Loop:
    """The running asyncio loop, as a channel binds to it."""
    return Loop(asyncio.get_running_loop())
