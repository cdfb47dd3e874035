"""``AwakeClock``: trio time less the time the daemon's own loop ran late.

A harness is judged by how long it has been silent. If the daemon itself stalls (SIGSTOP, a
host stall, CPU starvation, a long synchronous scan), the harness's pongs wait unread in the
daemon's socket buffer and its silence looks long although the harness was never late. So
silence is measured on this clock: a task that does nothing else (``keep``) wakes at known
deadlines a few times a second, and however much later than that it actually runs is time the
daemon was away, which the clock does not count. It is a task of its own so that a stall is
measured whatever the daemon was doing when it came (a watchdog busy pinging would miss it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

logger = logging.getLogger("tether.agentd")

NOISE = 0.01
"""Lateness below this is scheduling noise, not an absence."""


class AwakeClock:
    """Seconds the daemon was there to listen: ``trio.current_time()`` less every lateness of
    the keeper's wake-ups beyond ``NOISE``.

    A lateness counts from the moment it passes ``NOISE``, not from when the keeper gets to
    run: after a stop, whichever task runs first (a judge whose window just expired, say)
    already reads the clock without the stop in it. So awake time stands still while the
    daemon is away, and never goes back.
    """

    def __init__(self) -> None:
        self._counted = 0.0
        self._due: float | None = None
        """When the keeper means to wake next (trio time), while it waits."""
        self.worst = 0.0
        """The largest single lateness seen (for logs and benchmarks)."""

    @property
    def lag(self) -> float:
        """Seconds of lateness so far, the one under way included."""
        return self._counted + self._pending(trio.current_time())

    def now(self) -> float:
        """The current awake time (comparable only with other readings of this clock)."""
        now = trio.current_time()
        return now - self._counted - self._pending(now)

    def _pending(self, now: float) -> float:
        return 0.0 if self._due is None else max(0.0, now - self._due - NOISE)

    def woke(self, due: float) -> float:
        """The keeper meant to wake at ``due`` (trio time) and runs now: count how late it is;
        that lateness (0 within ``NOISE``)."""
        late = trio.current_time() - due
        self._due = None
        if late > NOISE:
            self._counted += late - NOISE
            self.worst = max(self.worst, late)
            return late
        return 0.0

    async def keep(self, period: float, warn_after: float) -> None:
        """Wake every ``period`` seconds and count how late each wake-up is, until cancelled;
        a lateness over ``warn_after`` is logged."""
        while True:
            due = self._due = trio.current_time() + period
            try:
                await trio.sleep_until(due)
            finally:
                late = self.woke(due)
            if late > warn_after:
                logger.warning(
                    "agentd ran %.1fs late (stopped, or starved of CPU); harnesses are not"
                    " blamed for it",
                    late,
                )

    async def within(self, window: float, fn: Callable[[], Awaitable[bool]]) -> bool:
        """``await fn()`` for at most ``window`` seconds of awake time (a window the daemon
        was stopped in is stretched by the stop); ``False`` if it did not finish. Restarts
        ``fn`` after a stop, so ``fn`` must be safe to cancel and call again."""
        deadline = self.now() + window
        while (remaining := deadline - self.now()) > 0:
            with trio.move_on_after(remaining):
                return await fn()
        return False
