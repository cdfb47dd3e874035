"""``FairBudget``: a reconnect budget that counts the host's time at a runnable process's share.

A harness gives up on its daemon after ``reconnect_for`` seconds unreachable. On a loaded host a
restarted daemon is slow to listen only because it waits for CPU (at a load of 30 on 2 CPUs,
its start-up takes 15 times as long), and a wall-clock budget then ends healthy harnesses. So
each second counts at the share of a CPU a runnable process gets now (CPUs / runnable
processes, from ``/proc/loadavg``), up to ``stretch`` times the budget in wall time, so a daemon
that is truly gone is still given up on under any load.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import _backend

STRETCH = 6.0
"""At most this many times the budget passes in wall time, however loaded the host."""


def cpu_share() -> float:
    """The share of one CPU a runnable process gets now (1.0 when there is a CPU to spare, or
    when ``/proc/loadavg`` cannot be read)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 1.0
    return min(1.0, (os.cpu_count() or 1) / max(running, 1))


class FairBudget:
    """``seconds`` of fair CPU time to wait, counted from the last ``restart``."""

    def __init__(
        self, seconds: float, *, stretch: float = STRETCH, share: Callable[[], float] = cpu_share
    ) -> None:
        self.seconds = seconds
        self._stretch = stretch
        self._share = share
        self.restart()

    def restart(self) -> None:
        """Start counting again (the daemon was reached)."""
        self._last = self._started = _backend.current_time()
        self._spent = 0.0

    def exhausted(self) -> bool:
        """Whether the budget is spent (counting the time since the last look at the share of
        the CPU read now), or ``stretch`` times it has passed in wall time."""
        now = _backend.current_time()
        self._spent += (now - self._last) * self._share()
        self._last = now
        return self._spent >= self.seconds or now - self._started >= self.seconds * self._stretch

    def waited(self) -> float:
        """Wall seconds since the last ``restart``."""
        return _backend.current_time() - self._started
