"""``Watchdog``: once a heartbeat, every harness is pinged (unless it beats: it sends a pong
every heartbeat unasked) or, if silent, judged; a phantom is stopped, reaped and respawned
without anyone asking, within the session's restart limit.

Beside it runs the awake clock's keeper, which counts the time the daemon itself was away
(stopped, starved, blocked) so that it counts against no harness. One task ticks for all
sessions, and sends every ping that the socket takes at once without a task switch, so an
idle daemon wakes once per heartbeat (and the keeper up to four times a second), plus once
per batch of pongs, however many sessions it holds.
"""

from __future__ import annotations

import logging

import attrs
import trio

from .._util import Throttle
from ..process import reap_orphans
from ._awake import AwakeClock
from ._events import EventKind
from ._guard import Tasks
from ._judge import Judge
from ._lease import HostLease
from ._lifecycle import Harnesses
from ._link import Link
from ._model import Harness, Session
from ._registry import Sessions
from ._settings import Settings
from ._stalls import Stalls
from ._starter import Starter

logger = logging.getLogger("tether.agentd")


@attrs.define(eq=False)
class Watchdog:
    """Pings, judges, replaces phantoms and (if the daemon owns its children) reaps orphans."""

    settings: Settings
    clock: AwakeClock
    sessions: Sessions
    judge: Judge
    harnesses: Harnesses
    starter: Starter
    lease: HostLease
    tasks: Tasks
    stalls: Stalls
    _throttle: Throttle = attrs.field(factory=lambda: Throttle(logger), init=False)

    async def run(self) -> None:
        """Tick until cancelled; a tick that fails is logged and the next one follows."""
        heartbeat = self.settings.heartbeat
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.clock.keep, min(heartbeat / 2, 0.25), heartbeat)
            while True:
                await trio.sleep(heartbeat)
                try:
                    await self.tick()
                except Exception:  # the watchdog must outlive any one bad tick
                    logger.exception("agentd watchdog tick failed; the next one follows")

    async def tick(self) -> None:
        waiting: list[Link] = []
        for session in self.sessions:
            harness = session.harness
            if harness is None or not harness.usable or harness.judging:
                continue
            if self.judge.suspect(harness):
                harness.judging = True
                self.tasks.start(self.judge_it, session, harness, name=f"judge {session.name}")
            elif harness.link is not None and harness.attached:
                await self.stalls.check(session, harness)
                link = harness.link  # read again: the link may have dropped during the check
                if link is not None and not link.beats and link.ping_nowait() is None:
                    waiting.append(link)
        for link in waiting:
            # Only a full socket buffer blocks: a harness that stopped reading.
            with trio.move_on_after(self.settings.heartbeat / 4):
                await link.ping()
        if self.settings.reap_orphans:
            try:
                for pid, code in reap_orphans():
                    logger.info("reaped orphan pid %d (exit status %d)", pid, code)
            except OSError as exc:  # EMFILE and friends: the next tick tries again
                self._throttle.warn("reap", "cannot reap orphans now: %s", exc)

    async def judge_it(self, session: Session, harness: Harness) -> None:
        """Make sure a silent harness is a phantom before saying so (a confirming ping with a
        fresh deadline); a phantom's tree is stopped and reaped, and the session respawned."""
        try:
            if await self.judge.answers(harness, self.settings.heartbeat):
                logger.info(
                    "session %s: harness pid %d answered the confirming ping",
                    session.name,
                    harness.ref.pid,
                )
                return
            detail = self.judge.why_phantom(harness)
            async with session.lock:
                if session.harness is not harness or not harness.usable:
                    return
                self.sessions.emit(session, EventKind.PHANTOM, harness, detail)
                await self.harnesses.retire(session, harness, "phantom")
        finally:
            harness.judging = False
        await self.starter.respawn(session)  # its backoff is waited out without the lock
