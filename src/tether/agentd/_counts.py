"""``Counts``: what the daemon counts for its metrics (``tether agentd --metrics``): deliveries
by outcome and how long each delivered one took."""

from __future__ import annotations

import bisect

import attrs

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the delivery-latency histogram."""


@attrs.define
class Counts:
    """Counters since the daemon started."""

    delivered: int = 0
    failed: int = 0
    latency_buckets: list[int] = attrs.field(factory=lambda: [0] * (len(BUCKETS) + 1))
    """Deliveries per latency bucket (the last one: above every bound)."""
    latency_sum: float = 0.0

    def delivery(self, seconds: float) -> None:
        """A prompt was delivered, ``seconds`` after it was queued."""
        self.delivered += 1
        self.latency_sum += seconds
        self.latency_buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def failure(self) -> None:
        """A prompt's delivery failed."""
        self.failed += 1
