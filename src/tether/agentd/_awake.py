"""``AwakeClock``: trio time less the time the daemon's own loop ran late.

A harness is judged by how long it has been silent. If the daemon itself stalls (SIGSTOP, a
host stall, CPU starvation, a long synchronous scan), the harness's pongs wait unread in the
daemon's socket buffer and its silence looks long although the harness was never late. So
silence is measured on this clock: the watchdog wakes once a heartbeat at a known deadline,
and however much later than that it actually runs is time the daemon was away, which the
clock does not count.
"""

from __future__ import annotations

import trio

NOISE = 0.01
"""Lateness below this is scheduling noise, not an absence."""


class AwakeClock:
    """Seconds the daemon was there to listen: ``trio.current_time()`` less every lateness of
    the watchdog's wake-ups beyond ``NOISE``."""

    def __init__(self) -> None:
        self.lag = 0.0
        """Seconds of lateness counted so far."""
        self.worst = 0.0
        """The largest single lateness seen (for logs and benchmarks)."""

    def now(self) -> float:
        """The current awake time (comparable only with other readings of this clock)."""
        return trio.current_time() - self.lag

    def woke(self, due: float) -> float:
        """The watchdog meant to wake at ``due`` (trio time) and runs now: count how late it
        is; that lateness."""
        late = trio.current_time() - due
        if late > NOISE:
            self.lag += late
            self.worst = max(self.worst, late)
            return late
        return 0.0
