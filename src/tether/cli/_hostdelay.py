"""How long the host kept runnable work from a CPU while a timed step ran, so that a demo bound
missed on a loaded machine reads LATE with the figure instead of FAIL (issue 43).

The measure is Linux's CPU pressure (PSI, ``/proc/pressure/cpu``): ``some total`` counts the
microseconds during which at least one runnable task waited for a CPU. On a quiet host it
hardly moves, so a bound missed there is still a failure; without PSI nothing is excused.
"""

from __future__ import annotations

import time

import attrs

PRESSURE = "/proc/pressure/cpu"

EXCUSED_UP_TO = 4.0
"""A step over this many times its bound fails whatever the host did: a hang is not load."""


def cpu_wait_total(path: str = PRESSURE) -> float | None:
    """Seconds since boot during which some runnable task waited for a CPU (PSI's ``some
    total``), or ``None`` where the kernel does not say."""
    try:
        with open(path, encoding="ascii") as pressure:
            for line in pressure:
                if line.startswith("some "):
                    total = next(f for f in line.split() if f.startswith("total="))
                    return int(total.removeprefix("total=")) / 1e6
    except (OSError, ValueError, StopIteration):
        return None
    return None


@attrs.define
class Stopwatch:
    """The wall time of a step and the host's CPU wait during it."""

    started: float = attrs.field(factory=time.perf_counter)
    waited_before: float | None = attrs.field(factory=cpu_wait_total)
    took: float = 0.0
    host_delay: float = 0.0

    def stop(self) -> float:
        """End the step; its wall time (``host_delay`` is then the CPU wait during it)."""
        self.took = time.perf_counter() - self.started
        waited = cpu_wait_total()
        if waited is not None and self.waited_before is not None:
            self.host_delay = max(0.0, waited - self.waited_before)
        return self.took

    def excuses(self, bound: float) -> bool:
        """Whether a step over ``bound`` is explained by the host: the excess is no more than
        the CPU wait measured during it, and the step is within ``EXCUSED_UP_TO`` bounds."""
        excess = self.took - bound
        return 0 < excess <= self.host_delay and self.took <= EXCUSED_UP_TO * bound
