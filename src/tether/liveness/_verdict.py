"""``verdict``: is a turn alive or stale now; ``watch_turn``: ask once a poll until it settles.

A verdict is on the hot path (every poll of every turn): no allocation when alive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from .. import _backend
from ._stream import StreamClock
from ._thresholds import Thresholds


@attrs.frozen
class Alive:
    """The turn is streaming, inside a tool call, or settled."""


@attrs.frozen
class Stale:
    """The turn has been silent longer than its threshold."""

    silence: float
    """Seconds of awake time since the last part."""
    threshold: float
    """The threshold it passed."""
    source: str
    """Where the threshold came from: ``default``, ``max_gap``, ``quantile`` or ``given``."""
    reason: str
    """A sentence for the transcript and the job's report."""


ALIVE = Alive()
"""The verdict for a turn that is not stale."""
Verdict = Alive | Stale


def verdict(clock: StreamClock, thresholds: Thresholds) -> Verdict:
    """``ALIVE`` unless the turn, unsettled and outside any tool call, has been silent longer
    than its phase's threshold (first token, or mid-stream)."""
    if clock.open_tools or clock.outcome is not None:
        return ALIVE
    silence = clock._now() - clock.last
    threshold = thresholds.first_token if clock.first is None else thresholds.mid_stream
    if silence <= threshold.seconds:
        return ALIVE
    phase = "first token" if clock.first is None else "mid-stream"
    return Stale(
        silence,
        threshold.seconds,
        threshold.source,
        f"no part for {silence:.1f}s {phase} on route {clock.route}"
        f" (threshold {threshold.seconds:.1f}s from {threshold.source})",
    )


async def watch_turn(
    clock: StreamClock,
    thresholds: Thresholds,
    on_stale: Callable[[Stale], Awaitable[object]],
    *,
    poll: float = 1.0,
) -> Verdict:
    """Check the turn every ``poll`` seconds (the loop's clock) until it settles (``ALIVE``) or
    goes stale (``on_stale`` is awaited with the verdict, which is returned).

    A dead turn is caught no later than its threshold plus one poll. Cancel safety: safe; it
    only sleeps and reads the clock.
    """
    while True:
        await _backend.sleep(poll)
        if clock.outcome is not None:
            return ALIVE
        found = verdict(clock, thresholds)
        if isinstance(found, Stale):
            await on_stale(found)
            return found
