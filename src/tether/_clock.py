"""Clocks of awake time, for stream and tool liveness, and how long the host was suspended.

Silence must not count a laptop's sleep: ``time.monotonic`` stops while the host is suspended
on Linux and macOS, and ``CLOCK_BOOTTIME`` (Linux) keeps counting, so their drift is the time
spent suspended. Tests use ``ManualClock`` and never wait.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What a ``StreamClock`` reads."""

    def now(self) -> float:
        """Seconds of awake time, from any fixed origin."""
        ...

    def suspended(self) -> float:
        """Seconds the host has spent suspended since the clock was made."""
        ...


class HostClock:
    """``time.monotonic`` for awake time; suspension from ``CLOCK_BOOTTIME`` where it exists
    (elsewhere ``suspended()`` is 0, and silence is still awake time only)."""

    def __init__(self) -> None:
        boottime = getattr(time, "CLOCK_BOOTTIME", None)
        self._boottime: int | None = boottime
        self._drift0 = self._drift()
        self.now = time.monotonic  # the hot path: no wrapper call
        """Seconds of awake time (``CLOCK_MONOTONIC``): what silence is measured in."""

    def _drift(self) -> float:
        if self._boottime is None:
            return 0.0
        return time.clock_gettime(self._boottime) - time.monotonic()

    def suspended(self) -> float:
        return max(0.0, self._drift() - self._drift0)


class ManualClock:
    """A clock a test moves: ``advance`` passes awake time, ``suspend`` passes sleep time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._suspended = 0.0

    def now(self) -> float:
        return self._now

    def suspended(self) -> float:
        return self._suspended

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def suspend(self, seconds: float) -> None:
        self._suspended += seconds
