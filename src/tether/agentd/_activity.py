"""``Activity`` and ``Stall``: what a harness's engine is doing, as its pongs say, and when
that is a stall.

A pong carries the engine's state (``idle``, ``turn``, ``tool``), how long it has run and how
long it has been silent, measured by the harness on its awake clock. The daemon anchors both
on its own awake clock when the pong arrives, so silence keeps growing between pongs and
neither a host's sleep nor the daemon's own lateness counts. A turn or a tool silent past its
threshold is a stall; the threshold is the harness's evidence (the ledger's, per route and
phase or per tool) or, where it has none, the daemon's ``stall_after``.
"""

from __future__ import annotations

import enum

import attrs

from ..wire import Pong

NAME_LIMIT = 128
"""Characters of a reported tool or route name that are kept."""


class StallPolicy(enum.StrEnum):
    """What agentd does with a stalled session (``Agentd(on_stall=...)``)."""

    ANNOUNCE = "announce"
    """Show it ``stalled`` and emit the event; leave the harness be (the default)."""
    RESPAWN = "respawn"
    """Supersede the harness (its open calls sealed ``stalled``) and spawn a fresh epoch."""


@attrs.frozen
class Activity:
    """What a harness last said its engine was doing, on the daemon's awake clock."""

    kind: str
    """``idle``, ``turn`` or ``tool``."""
    name: str
    since: float
    advanced: float
    threshold: float
    source: str

    @classmethod
    def from_pong(cls, pong: Pong, now: float) -> Activity | None:
        """The activity a pong reports (``None`` if it reports none: an older harness)."""
        if not pong.kind:
            return None
        # A harness's words are cut to size: it cannot make every ps row a megabyte.
        return cls(
            pong.kind[:16], pong.name[:NAME_LIMIT], now - max(pong.age, 0.0),
            now - max(pong.silence, 0.0), pong.threshold, pong.source[:16],
        )  # fmt: skip

    @property
    def busy(self) -> bool:
        return self.kind in ("turn", "tool")

    def describe(self) -> str:
        """``idle``, ``turn``, ``turn on ROUTE`` or ``tool NAME``."""
        if self.kind == "tool":
            return f"tool {self.name}"
        if self.kind == "turn" and self.name:
            return f"turn on {self.name}"
        return self.kind

    def silence(self, now: float) -> float:
        """Awake seconds since it last advanced (0 while idle)."""
        return max(0.0, now - self.advanced) if self.busy else 0.0

    def limit(self, default: float) -> tuple[float, str]:
        """Its threshold and where it came from; ``default`` (agentd's ``stall_after``) when
        the harness has no evidence."""
        if self.threshold > 0 and self.source not in ("", "default"):
            return self.threshold, self.source
        return default, "default"

    def stall(self, now: float, default: float) -> Stall | None:
        """The stall this activity is at ``now``, or ``None``."""
        if not self.busy:
            return None
        threshold, source = self.limit(default)
        silence = self.silence(now)
        if silence < threshold:
            return None
        return Stall(self.describe(), silence, threshold, source)


@attrs.frozen
class Stall:
    """A turn or a tool that has not advanced for ``threshold`` awake seconds."""

    what: str
    silence: float
    threshold: float
    source: str

    def describe(self) -> str:
        """``stalled: tool bash silent for 312 s (threshold 300 s from default)``."""
        return (
            f"stalled: {self.what} silent for {self.silence:.0f} s"
            f" (threshold {self.threshold:g} s from {self.source})"
        )
