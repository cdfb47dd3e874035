"""``TurnLog``: how a session's turns ended, as its harnesses report them (``TurnEnded``, wire
revision 6, ADR 0051), for ``tether ps``, the ``turn_failed`` event and ``send --wait-reply``.

The last outcome stays until a newer one replaces it, so a failure is shown until a turn
succeeds. Outcomes are kept by prompt id (a bounded number), so a waiter that comes after its
turn ended is answered at once, and a report sent again on a new connection is told apart
from a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..wire import TurnEnded
from ._outcomes import AgentdError
from ._state import SessionState

if TYPE_CHECKING:
    from ._model import Session
    from ._registry import Sessions

MAX_KEPT = 1_000
"""Outcomes kept per session, by prompt id (the oldest are dropped first)."""
TURN_REVISION = 6
"""The first harness revision that reports ``TurnEnded``."""
LOOK_EVERY = 1.0
"""Seconds between looks at the session's state while waiting for a turn (a stop or a
failure is not signalled to the waiter)."""


class TurnUnknown(AgentdError):
    """How a turn ends cannot be known: the session's harness predates wire revision 6
    (``tether send --wait-reply`` exits 69)."""


class TurnLog:
    """One session's turn outcomes, and the tasks waiting for one."""

    def __init__(self) -> None:
        self.last: TurnEnded | None = None
        """The last turn's outcome (``None``: none reported to this daemon)."""
        self._kept: dict[str, TurnEnded] = {}
        self._changed = trio.Event()

    def ended(self, outcome: TurnEnded) -> bool:
        """A harness reports ``outcome``; whether this daemon had not seen it before."""
        new = self._kept.pop(outcome.prompt_id, None) is None
        self._kept[outcome.prompt_id] = outcome
        if len(self._kept) > MAX_KEPT:
            del self._kept[next(iter(self._kept))]
        self.last = outcome
        self._changed.set()
        self._changed = trio.Event()
        return new

    def find(self, prompt_id: str) -> TurnEnded | None:
        """The outcome of ``prompt_id``'s turn, if it was reported."""
        return self._kept.get(prompt_id)

    async def changed(self) -> None:
        """Wait for the next report."""
        await self._changed.wait()


async def wait_turn(sessions: Sessions, name: str, prompt_id: str) -> TurnEnded:
    """How the turn of ``prompt_id`` (delivered) ended, once it has; if the session's harness
    exits on its own, or the session is stopped or fails, first, a failure saying so (the turn
    is not over: the next harness resumes it or ends it ``cut``).

    Raises:
        TurnUnknown: no such session, or its harness cannot say (it predates revision 6).
    """
    session = sessions.find(name)
    if session is None:
        raise TurnUnknown(name, "no such session")
    while (outcome := session.turns.find(prompt_id)) is None:
        harness = session.harness
        link = harness.link if harness is not None else None
        if link is not None and link.revision < TURN_REVISION:
            raise TurnUnknown(
                session.name,
                f"prompt {prompt_id} was delivered, but its harness (wire revision"
                f" {link.revision}) does not report how turns end (revision {TURN_REVISION})",
            )
        cut = _cut(session, prompt_id)
        if cut is not None:
            return cut
        with trio.move_on_after(LOOK_EVERY):
            await session.turns.changed()
    return outcome


def _cut(session: Session, prompt_id: str) -> TurnEnded | None:
    """A failure for a turn no harness is left to end: its own exited (one the daemon
    retires is replaced), or the session was stopped or failed."""
    state, harness = session.state, session.harness
    later = "; the next start or send resumes the turn or ends it cut"
    if state is SessionState.DEAD and harness is not None and not harness.retired:
        why = f"the harness exited with code {harness.code} before the turn ended{later}"
        return TurnEnded(prompt_id, "exited", 0, why)
    if state in (SessionState.STOPPED, SessionState.FAILED):
        why = f"the session was {state.value} before the turn ended{later}"
        return TurnEnded(prompt_id, state.value, 0, why)
    return None
