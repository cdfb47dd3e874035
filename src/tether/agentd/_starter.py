"""``Starter``: the decision ``start_agent`` takes for a session, under that session's lock.

- a live harness of the current epoch whose loop answers (the ``Judge``): reattach (Nudge);
- one silent past its patience, and past a confirming ping: a phantom, retired, respawned;
- one of an older epoch (another daemon or host bumped it): superseded, then respawned;
- a dead harness or none: spawn (``spawned`` the first time, ``respawned`` after), counted by
  the restart limit.
"""

from __future__ import annotations

import attrs
import trio

from ..epochs import EpochStore
from ..wire import Nudge
from ._events import EventKind
from ._guard import Tasks
from ._judge import Judge
from ._lease import HostLease
from ._lifecycle import Harnesses
from ._model import Session
from ._outcomes import Attached, How, SessionFailed, Unconfirmed
from ._records import Records
from ._registry import Sessions
from ._settings import Settings
from ._state import SessionState


@attrs.define(eq=False)
class Starter:
    """Makes sure a session has one healthy harness attached."""

    settings: Settings
    store: EpochStore
    lease: HostLease
    sessions: Sessions
    harnesses: Harnesses
    judge: Judge
    records: Records
    tasks: Tasks

    async def start(self, session: Session, *, nudge: bool) -> Attached:
        """The decision; see the module's docstring. A reattach sends a ``Nudge`` unless
        ``nudge`` is false (a prompt follows, which is nudge enough).

        Raises:
            SessionFailed, Unconfirmed, StartFailed, SpawnError, OwnedElsewhere,
            StoreUnavailable: as ``Agentd.start_agent`` says.
        """
        self.tasks.check()
        async with session.lock:
            if session.state is SessionState.FAILED:
                raise SessionFailed(session.name, session.reason or SessionState.FAILED)
            if not self.lease.confirmed():
                raise Unconfirmed(session.name, self.lease.lost())
            harness = session.live_harness()
            if harness is not None:
                current = await self.store.current(session.name)
                if harness.epoch != current:
                    await self.harnesses.supersede(session, harness, current)
                elif await self.judge.healthy(harness):
                    assert harness.link is not None
                    pid, epoch = harness.ref.pid, harness.epoch
                    reattached = Attached(session.name, pid, epoch, "reattached")
                    if not nudge:
                        return reattached
                    if await harness.link.send(Nudge()):
                        self.sessions.emit(session, EventKind.REATTACHED, harness)
                        return reattached
                else:
                    if not harness.retired:
                        patience = self.settings.patience
                        detail = f"no answer within {patience:.1f}s of its last sign of life"
                        self.sessions.emit(session, EventKind.PHANTOM, harness, detail)
                    await self.harnesses.retire(session, harness, "phantom")
            return await self.spawn(session, "respawned" if session.known else "spawned")

    async def spawn(self, session: Session, how: How) -> Attached:
        """Bump the epoch, count a restart, and start a fresh harness (the lock is held).

        Raises:
            SessionFailed: the restart limit is reached.
        """
        epoch = await self.store.bump(session.name)  # first: a refused bump is no restart
        if how == "respawned":
            self._count_restart(session)
        return await self.harnesses.spawn(session, how, epoch)

    def _count_restart(self, session: Session) -> None:
        limit, window = self.settings.restart_limit
        now = trio.current_time()
        while session.recent and now - session.recent[0] > window:
            session.recent.popleft()
        if len(session.recent) >= limit:
            reason = f"restart limit: more than {limit} restarts in {window:g}s"
            session.become(SessionState.FAILED)
            session.reason = reason
            self.sessions.emit(session, EventKind.FAILED, session.harness, reason)
            self.tasks.start(self._save_failed, session, name="save failed")
            raise SessionFailed(session.name, reason)
        session.recent.append(now)
        session.restarts += 1

    async def _save_failed(self, session: Session) -> None:
        await self.records.save(session, None, SessionState.FAILED, keep_pid=False)
