"""``Threshold`` and ``Thresholds``: how much silence a route's turns may show, from evidence.

Until a route has ``MIN_SAMPLES`` healthy turns, a phase's threshold is the larger of a
conservative ``DEFAULT`` and the largest healthy value seen times ``MARGIN``; after that, the
larger of the 99.9th percentile times ``MARGIN`` and the largest healthy value: never below
what a healthy turn was seen to do. Where the number came from travels with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import attrs

DEFAULT = 300.0
MARGIN = 1.5
MIN_SAMPLES = 20
QUANTILE = 0.999

Source = Literal["default", "max_gap", "quantile", "given"]
"""Where a threshold came from: no evidence yet, the evidence, or the caller."""


@attrs.frozen
class Threshold:
    """Seconds of silence a phase tolerates, and where that number came from."""

    seconds: float
    """The silence, in seconds, after which a turn is stale."""
    source: Source
    """Where the number came from: ``default``, ``max_gap``, ``quantile`` or ``given``."""
    samples: int = 0
    """How many healthy turns it was learned from."""


@attrs.frozen
class Thresholds:
    """A route's thresholds: before the first token, and between parts after it."""

    route: str
    """The route they are for."""
    first_token: Threshold
    """The silence allowed before the first part."""
    mid_stream: Threshold
    """The silence allowed between parts."""

    @classmethod
    def default(cls, route: str) -> Thresholds:
        """The conservative thresholds of a route with no evidence yet."""
        return cls(route, Threshold(DEFAULT, "default"), Threshold(DEFAULT, "default"))


def derive(samples: Sequence[float]) -> Threshold:
    """A phase's threshold from the healthy turns' values (time to first token, or each
    turn's largest gap)."""
    if not samples:
        return Threshold(DEFAULT, "default")
    largest = max(samples)
    if len(samples) < MIN_SAMPLES:
        by_gap = largest * MARGIN
        if by_gap > DEFAULT:
            return Threshold(by_gap, "max_gap", len(samples))
        return Threshold(DEFAULT, "default", len(samples))
    by_quantile = _quantile(sorted(samples), QUANTILE) * MARGIN
    if by_quantile >= largest:
        return Threshold(by_quantile, "quantile", len(samples))
    return Threshold(largest, "max_gap", len(samples))


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
