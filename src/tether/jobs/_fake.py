"""``FakeBackend``: a thread server for tests that applies interrupts late and can go down."""

from __future__ import annotations

import attrs
import trio

from ._model import BackendUnreachable, TurnState


@attrs.define
class _Turn:
    status: str = "running"
    interrupt_at: float | None = None
    session_stopped: bool = False


class FakeBackend:
    """Turns by id; ``interrupt`` takes effect ``interrupt_delay`` seconds (trio's clock) after
    it is asked (``None``: never); ``reachable = False`` makes every call raise
    ``BackendUnreachable``."""

    def __init__(self, *, interrupt_delay: float | None = 0.06) -> None:
        self.interrupt_delay = interrupt_delay
        """Seconds before an interrupt takes effect (``None``: it never does)."""
        self.reachable = True
        """Set to ``False`` to make every call raise ``BackendUnreachable``."""
        self.turns: dict[str, _Turn] = {}
        """The turns it knows, by id."""
        self.calls: list[tuple[str, str]] = []
        """Every call made, as ``(method, turn)``, in order."""

    def start(self, turn: str) -> None:
        """A turn begins running."""
        self.turns[turn] = _Turn()

    def finish(self, turn: str, status: str = "completed") -> None:
        """A turn ends on its own."""
        self.turns[turn].status = status

    def stop_session(self, turn: str) -> None:
        """The turn's session stops with no active turn, its status left as it was."""
        self.turns[turn].session_stopped = True

    def _check(self, call: str, turn: str) -> _Turn:
        self.calls.append((call, turn))
        if not self.reachable:
            raise BackendUnreachable("fake thread server at fake://threads: connection refused")
        return self.turns.setdefault(turn, _Turn())

    async def interrupt(self, turn: str) -> None:
        await trio.lowlevel.checkpoint()
        state = self._check("interrupt", turn)
        if state.status == "running" and self.interrupt_delay is not None:
            state.interrupt_at = trio.current_time() + self.interrupt_delay

    async def snapshot(self, turn: str) -> TurnState:
        await trio.lowlevel.checkpoint()
        state = self._check("snapshot", turn)
        if state.interrupt_at is not None and trio.current_time() >= state.interrupt_at:
            state.status = "interrupted"
            state.interrupt_at = None
        active = state.status == "running" and not state.session_stopped
        return TurnState(turn, state.status, state.session_stopped, active)
