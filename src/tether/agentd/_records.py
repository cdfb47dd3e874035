"""``Records``: what the daemon keeps in the store about each session's harness, so a restarted
daemon can find it again; one writer, fenced by the harness's epoch."""

from __future__ import annotations

import logging

import attrs

from ..epochs import EpochStore, OwnedElsewhere, SessionRecord, StoreUnavailable
from ..epochs import Superseded as EpochSuperseded
from ..process import boot_id
from ._model import Harness, Session
from ._state import SessionState

logger = logging.getLogger("tether.agentd")


@attrs.define(eq=False)
class Records:
    """Session records in ``store``, written by the daemon of host ``host``."""

    store: EpochStore
    host: str | None

    async def save(
        self,
        session: Session,
        harness: Harness | None,
        state: SessionState,
        *,
        keep_pid: bool = True,
        quiet: bool = True,
    ) -> None:
        """Write the session's record: ``state``, its restarts and reason, and the harness's
        identity unless ``keep_pid`` is false (it exited, or was stopped).

        A newer epoch's record stands (logged). With ``quiet`` (the default) a store that is
        unreachable, or a session another host owns, loses this record only, logged: the next
        save writes the whole state again.

        Raises:
            OwnedElsewhere, StoreUnavailable: without ``quiet``.
        """
        keep = harness is not None and keep_pid
        record = SessionRecord(
            pid=harness.ref.pid if keep and harness else None,
            create_time=harness.ref.create_time if keep and harness else None,
            boot_id=boot_id(),
            state=state.to_record(),
            restarts=session.restarts,
            reason=session.reason,
            host=self.host,
            history=tuple(session.history),
            streak=session.streak,
            next_attempt=session.next_attempt,
            stalled=session.stall_detail,
        )
        try:
            if harness is not None:
                epoch = harness.epoch
            else:
                epoch = await self.store.current(session.name) or 0
            await self.store.save(session.name, record, epoch=epoch)
        except (EpochSuperseded, OwnedElsewhere, StoreUnavailable) as exc:
            if not quiet and not isinstance(exc, EpochSuperseded):
                raise
            logger.log(
                logging.WARNING if isinstance(exc, StoreUnavailable) else logging.INFO,
                "session %s: record not saved: %s",
                session.name,
                exc,
            )
