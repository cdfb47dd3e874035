"""``SessionState``: what a session is, in one vocabulary for memory, the store and ``tether ps``.

The store's records have always said ``running`` and ``exited`` where the daemon said
``attached``/``disconnected`` and ``dead``; those strings stay on disk, so stores written by
earlier versions read the same and an earlier daemon can still read what this one writes. They
are translated here and nowhere else, so ``tether ps`` shows the same state for the same
harness before and after a daemon restart.
"""

from __future__ import annotations

import enum


class SessionState(enum.StrEnum):
    """A session's state, as ``tether ps`` shows it."""

    NEW = "new"
    """Known by name; no harness was ever started."""
    STARTING = "starting"
    """A harness was spawned and has not said hello yet."""
    ATTACHED = "attached"
    """Its harness is connected and answers pings."""
    STALLED = "stalled"
    """Its harness answers pings but its engine's turn or tool has not advanced past its
    threshold (ADR 0025)."""
    DISCONNECTED = "disconnected"
    """Its harness runs but is not connected (it has ``patience`` to come back)."""
    DEAD = "dead"
    """Its harness exited (or was retired); the next start or send respawns it."""
    STOPPED = "stopped"
    """Stopped on request; it stays down until started."""
    FAILED = "failed"
    """It hit its restart limit; it stays down until ``reset``."""
    ELSEWHERE = "elsewhere"
    """Another host wrote its record last (a shared store): that host runs it."""
    UNCONFIRMED = "unconfirmed"
    """Shown for every session this daemon runs while its host lease is not known alive."""

    @property
    def settled(self) -> bool:
        """Stopped or failed: down on purpose, so nothing restarts it by itself."""
        return self in (SessionState.STOPPED, SessionState.FAILED)

    def to_record(self) -> str:
        """The string a session record stores for this state."""
        return _TO_RECORD.get(self, self.value)

    @classmethod
    def from_record(cls, text: str) -> SessionState:
        """The state a stored record's string means (``new`` for one this version does not
        know)."""
        known = _FROM_RECORD.get(text)
        if known is not None:
            return known
        try:
            return cls(text)
        except ValueError:
            return cls.NEW


_TO_RECORD = {
    SessionState.ATTACHED: "running",
    SessionState.DISCONNECTED: "running",
    SessionState.DEAD: "exited",
}
_FROM_RECORD = {"running": SessionState.DISCONNECTED, "exited": SessionState.DEAD}
