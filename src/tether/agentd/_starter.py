"""``Starter``: the decision ``start_agent`` takes for a session, under that session's lock.

- a live harness of the current epoch whose loop answers (the ``Judge``): reattach (Nudge);
- one silent past its patience, and past a confirming ping: a phantom, retired, respawned;
- one of an older epoch (another daemon or host bumped it): superseded, then respawned;
- a dead harness or none: spawn (``spawned`` the first time, ``respawned`` after), counted by
  the restart limit.
"""

from __future__ import annotations

import logging
import time

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
from ._outcomes import REFUSED, Attached, How, SessionFailed, Unconfirmed
from ._records import Records
from ._registry import Sessions
from ._settings import Settings
from ._state import SessionState

logger = logging.getLogger("tether.agentd")


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
        ``nudge`` is false (a prompt follows, which is nudge enough). A restart waits out the
        session's backoff first, without its lock (so it can be stopped meanwhile).

        Raises:
            SessionFailed, Unconfirmed, StartFailed, SpawnError, OwnedElsewhere,
            StoreUnavailable: as ``Agentd.start_agent`` says.
        """
        self.tasks.check()
        await self.wait_backoff(session)
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
                    # It answered: reattached, even if its link dropped since (it is
                    # reconnecting; a new epoch would kill a healthy harness).
                    pid, epoch = harness.ref.pid, harness.epoch
                    link = harness.link
                    if nudge and link is not None and await link.send(Nudge()):
                        self.sessions.emit(session, EventKind.REATTACHED, harness)
                    return Attached(session.name, pid, epoch, "reattached")
                else:
                    if not harness.retired and harness.alive:  # a dead one was "exited"
                        patience = self.judge.patience(harness)
                        detail = f"no answer within {patience:.1f}s of its last sign of life"
                        self.sessions.emit(session, EventKind.PHANTOM, harness, detail)
                    await self.harnesses.retire(session, harness, "phantom")
            return await self.spawn(session, "respawned" if session.known else "spawned")

    async def wait_backoff(self, session: Session) -> None:
        """Sleep until the session's next restart is due, if it needs one (no live harness)."""
        due = session.next_attempt
        if due is None or session.live_harness() is not None or session.state.settled:
            return
        delay = due - time.time()
        if delay > 0:
            logger.info("session %s: backing off %.1fs before its restart", session.name, delay)
            await trio.sleep(delay)

    async def respawn(self, session: Session) -> None:
        """Start a fresh harness for a session whose harness is gone (after a phantom or a
        stall), once its backoff allows; a refusal (the restart limit, a lost lease) is logged
        and stands."""
        await self.wait_backoff(session)
        async with session.lock:
            if session.live_harness() is not None or session.state.settled:
                return
            if not self.lease.confirmed():
                return
            try:
                await self.spawn(session, "respawned")
            except REFUSED as exc:
                logger.warning("session %s: not respawned: %s", session.name, exc)

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
        """Count a restart in the window (wall-clock times, kept in the record), fail the
        session past the limit, and set the backoff before the next one."""
        limit, window = self.settings.restart_limit
        now = time.time()
        session.history = [at for at in session.history if now - at <= window]
        if len(session.history) >= limit:
            reason = f"restart limit: more than {limit} restarts in {window:g}s"
            session.become(SessionState.FAILED)
            session.reason = reason
            session.next_attempt = None
            self.sessions.emit(session, EventKind.FAILED, session.harness, reason, reason=reason)
            self.tasks.start(self._save_failed, session, name="save failed")
            raise SessionFailed(session.name, reason)
        previous = session.harness
        backoff = self.settings.restart_backoff
        if previous is not None and now - previous.ref.create_time >= backoff.reset_after:
            session.streak = 0  # it stayed up: not a crash loop
        session.history.append(now)
        session.restarts += 1
        session.streak += 1
        session.next_attempt = now + backoff.delay(session.streak)

    async def _save_failed(self, session: Session) -> None:
        await self.records.save(session, None, SessionState.FAILED, keep_pid=False)
