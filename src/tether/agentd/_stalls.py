"""``Stalls``: a session whose harness answers pings while its engine does not advance.

The watchdog asks on every tick. A turn or a tool silent past its threshold (the harness's
evidence, else ``stall_after``) starts a stall episode: the session shows ``stalled``, one
``stalled`` event names what is stuck, its silence, its threshold and where that came from,
and the record keeps it, so a restarted daemon shows it too and does not announce it again.
Progress ends the episode with a ``recovered`` event. At the start of an episode the harness
is asked where its engine waits (``tether inspect``'s summary), which ``tether ps`` shows.
With ``StallPolicy.RESPAWN`` the harness is superseded with the stall as the reason (its open
calls are sealed with it) and a fresh epoch starts, within the restart limit and its backoff.
"""

from __future__ import annotations

import logging

import attrs

from ..epochs import EpochStore
from ._activity import Stall, StallPolicy
from ._awake import AwakeClock
from ._events import EventKind
from ._guard import Tasks
from ._inspection import inspect
from ._lifecycle import Harnesses
from ._model import Harness, Session
from ._outcomes import AgentdError
from ._records import Records
from ._registry import Sessions
from ._settings import Settings
from ._starter import Starter
from ._state import SessionState

logger = logging.getLogger("tether.agentd")

WAITS_CHARS = 300
"""Characters of a stalled session's "where it waits" line kept for ``tether ps``."""


@attrs.define(eq=False)
class Stalls:
    """Starts and ends stall episodes, and applies the stall policy."""

    settings: Settings
    clock: AwakeClock
    store: EpochStore
    sessions: Sessions
    records: Records
    harnesses: Harnesses
    starter: Starter
    tasks: Tasks

    async def check(self, session: Session, harness: Harness) -> None:
        """Judge ``harness``'s last reported activity now; a new episode or its end is in the
        record before this returns."""
        activity = harness.activity
        if activity is None:
            return  # it has not said (yet, or ever: an earlier version)
        stall = activity.stall(self.clock.now(), self.settings.stall_after)
        if stall is not None:
            episode = session.stall is None
            session.stall = stall
            if episode:
                await self._began(session, harness, stall)
        elif session.stall is not None or session.stall_detail is not None:
            await self._ended(session, harness)

    async def _began(self, session: Session, harness: Harness, stall: Stall) -> None:
        continued = session.stall_detail is not None  # announced before a daemon restart
        session.stall_detail = stall.describe()
        session.become(SessionState.STALLED)
        if continued:
            logger.info("session %s: still %s", session.name, session.stall_detail)
        else:
            self.sessions.emit(
                session, EventKind.STALLED, harness, session.stall_detail,
                reason=session.stall_detail,
            )  # fmt: skip
            await self._save(session, harness)
        self.tasks.start(self._where, session, harness, name=f"inspect {session.name}")
        if self.settings.on_stall is StallPolicy.RESPAWN and not harness.retired:
            self.tasks.start(self._respawn, session, harness, stall, name=f"unstall {session.name}")

    async def _where(self, session: Session, harness: Harness) -> None:
        """Ask the stalled harness where its engine waits, for ``tether ps``; a harness that
        cannot say (an older one, a held trio thread) leaves it unknown."""
        try:
            found = await inspect(session)
        except AgentdError as exc:
            logger.info("session %s: where it waits is not known: %s", session.name, exc.reason)
            return
        if session.stall is not None and session.harness is harness:
            session.waits = str(found["snapshot"].get("summary", ""))[:WAITS_CHARS]

    async def _ended(self, session: Session, harness: Harness) -> None:
        what = session.stall.what if session.stall is not None else "its engine"
        session.stall = None
        session.stall_detail = None
        session.waits = ""
        if session.state is SessionState.STALLED:
            attached = harness.attached
            session.become(SessionState.ATTACHED if attached else SessionState.DISCONNECTED)
        self.sessions.emit(session, EventKind.RECOVERED, harness, f"{what} advanced again")
        await self._save(session, harness)

    async def _save(self, session: Session, harness: Harness) -> None:
        if session.harness is harness and harness.usable:
            await self.records.save(session, harness, session.state)

    async def _respawn(self, session: Session, harness: Harness, stall: Stall) -> None:
        """Supersede the stalled harness (the stall is its reason), then start a fresh one."""
        async with session.lock:
            if session.harness is not harness or not harness.usable:
                return
            session.stall = None
            session.stall_detail = None
            current = await self.store.bump(session.name)
            await self.harnesses.supersede(session, harness, current, reason=stall.describe())
        await self.starter.respawn(session)
