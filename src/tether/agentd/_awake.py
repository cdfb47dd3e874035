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

import trio

logger = logging.getLogger("tether.agentd")

NOISE = 0.01
"""Lateness below this is scheduling noise, not an absence."""


class AwakeClock:
    """Seconds the daemon was there to listen: ``trio.current_time()`` less every lateness of
    the keeper's wake-ups beyond ``NOISE``."""

    def __init__(self) -> None:
        self.lag = 0.0
        """Seconds of lateness counted so far."""
        self.worst = 0.0
        """The largest single lateness seen (for logs and benchmarks)."""

    def now(self) -> float:
        """The current awake time (comparable only with other readings of this clock)."""
        return trio.current_time() - self.lag

    def woke(self, due: float) -> float:
        """The keeper meant to wake at ``due`` (trio time) and runs now: count how late it is;
        that lateness."""
        late = trio.current_time() - due
        if late > NOISE:
            self.lag += late
            self.worst = max(self.worst, late)
            return late
        return 0.0

    async def keep(self, period: float, warn_after: float) -> None:
        """Wake every ``period`` seconds and count how late each wake-up is, until cancelled;
        a lateness over ``warn_after`` is logged."""
        due = trio.current_time() + period
        while True:
            await trio.sleep_until(due)
            late = self.woke(due)
            if late > warn_after:
                logger.warning(
                    "agentd ran %.1fs late (stopped, or starved of CPU); harnesses are not"
                    " blamed for it",
                    late,
                )
            due = trio.current_time() + period
