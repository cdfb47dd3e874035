"""``StreamClock``: the liveness of one model turn, fed every streamed part.

Silence is the awake time since the last part; an open tool call pauses it (a tool may run for
ten minutes without a token), and a ``completed`` or ``error`` part settles the turn, which is
never stale after. Time to first token and the largest gap between parts are kept for the
ledger. ``mark`` is on the hot path of every token: a few attribute writes, no allocation.
"""

from __future__ import annotations

import attrs

from .._clock import Clock, HostClock

KINDS = frozenset({"text", "reasoning", "tool_open", "tool_close", "completed", "error"})
_PLAIN = frozenset({"text", "reasoning"})
"""The kinds of every token: they only move the clock."""


@attrs.frozen
class TurnStats:
    """What the ledger keeps of a finished turn."""

    route: str
    """The route the turn ran on."""
    ttft: float | None
    """Seconds from the turn's start to its first part (``None``: no part came)."""
    max_gap: float
    """The largest silence between two parts, tool calls excluded."""
    parts: int
    """How many parts it streamed."""
    outcome: str
    """``completed``, ``error``, ``stale`` or ``interrupted``."""
    suspended: float
    """Seconds the host slept during the turn (never counted as silence)."""


class StreamClock:
    """Fed by ``mark(kind)`` for every part of one turn on one route."""

    __slots__ = (
        "_clock",
        "_now",
        "_suspended_at_start",
        "first",
        "last",
        "max_gap",
        "open_tools",
        "outcome",
        "parts",
        "route",
        "started",
    )

    def __init__(self, route: str, *, clock: Clock | None = None) -> None:
        self.route = route
        """The route the turn runs on (its thresholds are that route's)."""
        self._clock = clock if clock is not None else HostClock()
        self._now = self._clock.now
        self._suspended_at_start = self._clock.suspended()
        self.started = self._now()
        """When the turn started (awake time)."""
        self.last = self.started
        """When the last part came (awake time)."""
        self.first: float | None = None
        """When the first part came (``None``: none yet)."""
        self.max_gap = 0.0
        """The largest silence between two parts so far, tool calls excluded."""
        self.parts = 0
        """How many parts came."""
        self.open_tools = 0
        """How many tool calls are open (the turn is alive while one is)."""
        self.outcome: str | None = None
        """How the turn ended (``None``: it has not)."""

    def __repr__(self) -> str:
        return (
            f"<StreamClock {self.route!r} parts={self.parts} open_tools={self.open_tools}"
            f" outcome={self.outcome}>"
        )

    def mark(self, kind: str) -> None:
        """Record one streamed part: ``text``, ``reasoning``, ``tool_open``, ``tool_close``,
        ``completed`` or ``error``.

        Raises:
            ValueError: an unknown kind.
        """
        now = self._now()
        if kind not in _PLAIN:  # the rare kinds: checked, and counted on their own
            self._mark_other(kind, now)
            return
        if self.first is None:
            self.first = now
        elif not self.open_tools:
            gap = now - self.last
            if gap > self.max_gap:
                self.max_gap = gap
        self.last = now
        self.parts += 1

    def _mark_other(self, kind: str, now: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown part kind {kind!r}; expected one of {sorted(KINDS)}")
        if self.first is None:
            self.first = now
        elif self.open_tools == 0 and kind != "tool_close":
            gap = now - self.last
            if gap > self.max_gap:
                self.max_gap = gap
        self.last = now
        self.parts += 1
        if kind == "tool_open":
            self.open_tools += 1
        elif kind == "tool_close":
            if self.open_tools:
                self.open_tools -= 1
        else:
            self.outcome = kind

    @property
    def settled(self) -> bool:
        """Whether a ``completed`` or ``error`` part ended the turn."""
        return self.outcome is not None

    def silence(self) -> float:
        """Awake seconds since the last part (0 while a tool is open or once settled)."""
        if self.open_tools or self.outcome is not None:
            return 0.0
        return self._now() - self.last

    def suspended(self) -> float:
        """Seconds the host slept since this turn started."""
        return self._clock.suspended() - self._suspended_at_start

    def stats(self, outcome: str | None = None) -> TurnStats:
        """This turn for the ledger; ``outcome`` overrides (``stale``, ``interrupted``)."""
        return TurnStats(
            self.route,
            None if self.first is None else self.first - self.started,
            self.max_gap,
            self.parts,
            outcome or self.outcome or "interrupted",
            self.suspended(),
        )
