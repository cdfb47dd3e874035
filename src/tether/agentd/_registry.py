"""``Sessions``: every session the daemon knows, by name, and what happens to each.

A session is created the first time its name is used (the name must be safe for a path), and
every event about it goes through ``emit``: a line in the event log, a log record, an item for
each subscriber, and the session's ``last_event``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from ._events import AgentEvent, EventKind, EventLog
from ._model import Harness, Session
from ._outcomes import SessionStatus
from ._state import SessionState

_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a session (and its directory): 1 to 128 letters, digits,
    ``.``, ``_`` or ``-``, starting with a letter or digit."""
    return _SESSION_NAME.fullmatch(name) is not None


class Sessions:
    """The sessions, and the event log they report to."""

    def __init__(self, events: EventLog) -> None:
        self.events = events
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, name: object) -> bool:
        """Whether a session of that name is known (recorded, or started since)."""
        return name in self._sessions

    def __iter__(self) -> Iterator[Session]:
        """Every session, in name order (a snapshot: safe to change them meanwhile)."""
        return iter([self._sessions[name] for name in sorted(self._sessions)])

    def find(self, name: str) -> Session | None:
        """The session called ``name``, if it exists (nothing is created)."""
        return self._sessions.get(name)

    def get(self, name: str) -> Session:
        """The session called ``name``, created if new.

        Raises:
            ValueError: the name is not safe for a path.
        """
        session = self._sessions.get(name)
        if session is None:
            if not valid_name(name):
                raise ValueError(
                    f"session name {name!r}: use 1 to 128 letters, digits, '.', '_' or '-',"
                    " starting with a letter or digit"
                )
            session = self._sessions[name] = Session(name)
        return session

    def emit(
        self,
        session: Session,
        kind: EventKind,
        harness: Harness | None = None,
        detail: str = "",
        *,
        epoch: int | None = None,
        prompt_id: str | None = None,
        attempt: int | None = None,
        code: int | None = None,
        reason: str | None = None,
        failure: str | None = None,
        status: int | None = None,
    ) -> None:
        """Report one change of ``session`` (with ``harness``'s epoch and pid, if given, and
        the fields a reader should not have to parse out of ``detail``)."""
        event = AgentEvent(
            session.name,
            kind,
            epoch if epoch is not None else (harness.epoch if harness else None),
            harness.ref.pid if harness else None,
            detail,
            prompt_id=prompt_id,
            attempt=attempt,
            code=code,
            reason=reason,
            failure=failure,
            status=status,
        )
        said = detail.startswith(f"{kind}:")  # a stall's description names itself
        session.last_event = detail if said else kind if not detail else f"{kind}: {detail}"
        self.events.emit(event)

    def status(self, confirmed: bool, now: float, stall_after: float) -> list[SessionStatus]:
        """One row per session, by name; unless ``confirmed`` (the host lease is known alive),
        every session this daemon runs shows ``unconfirmed``. ``now`` is the awake clock's
        reading, ``stall_after`` the threshold where a harness has no measured one."""
        rows = []
        wall = time.time()
        for session in self:
            harness = session.harness
            link = harness.link if harness is not None else None
            state = session.state
            if not confirmed and not state.settled and state is not SessionState.ELSEWHERE:
                state = SessionState.UNCONFIRMED
            live = harness is not None and harness.alive
            activity = harness.activity if harness is not None and live else None
            threshold, source = activity.limit(stall_after) if activity else (None, "")
            due = session.next_attempt
            turn = session.turns.last
            rows.append(
                SessionStatus(
                    session=session.name,
                    state=state,
                    epoch=harness.epoch if harness is not None else None,
                    pid=harness.ref.pid if harness is not None and live else None,
                    heartbeat_age=round(link.silence(), 3) if link is not None else None,
                    restarts=session.restarts,
                    last_event=session.last_event,
                    activity=activity.describe() if activity else "",
                    silence=round(activity.silence(now), 3) if activity and activity.busy else None,
                    threshold=threshold if activity and activity.busy else None,
                    threshold_source=source if activity and activity.busy else "",
                    next_attempt=round(due - wall, 3) if due is not None and due > wall else None,
                    waits=session.waits if state is SessionState.STALLED else "",
                    last_turn=turn.brief() if turn is not None else "",
                    turn_detail=turn.detail if turn is not None else "",
                )
            )
        return rows

    def attached(self) -> dict[str, int]:
        """Session name to the pid of its attached harness, for every attached session."""
        return {
            session.name: session.harness.ref.pid
            for session in self
            if session.harness is not None and session.harness.link is not None
        }
