"""What a daemon on a store that several hosts share does about its own lease and the others':
``LeaseWatch`` says when the lease is lost and re-confirms each session once it is held
again; ``Takeover`` takes over the sessions of hosts whose lease ended (with ``adopt``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import attrs
import trio

from ..channels import channel
from ..epochs import EpochStore, LeasedEpochStore, StoreUnavailable
from ._events import EventKind
from ._guard import Tasks
from ._lease import SharedHost
from ._lifecycle import Harnesses
from ._model import Session
from ._outcomes import REFUSED
from ._registry import Sessions, valid_name
from ._settings import Settings
from ._state import SessionState

logger = logging.getLogger("tether.agentd")


@attrs.define(eq=False)
class LeaseWatch:
    """Checks the lease once a heartbeat, and the moment it would run out: the daemon refuses
    work from then on, and its ``unconfirmed`` events carry that moment."""

    settings: Settings
    lease: SharedHost
    store: EpochStore
    sessions: Sessions
    harnesses: Harnesses
    tasks: Tasks
    _was_confirmed: bool = attrs.field(default=True, init=False)

    async def run(self) -> None:
        while True:
            remaining = self.lease.remaining()
            await trio.sleep(
                min(self.settings.heartbeat, remaining + 0.001 if remaining else math.inf)
            )
            self.check()

    def check(self) -> None:
        """Say when the lease is lost; once it is held again, confirm each session whose epoch
        is still ours and supersede the harness of each that another host bumped meanwhile."""
        held = self.lease.confirmed()
        if held == self._was_confirmed:
            return
        self._was_confirmed = held
        if not held:
            logger.error("%s; deliveries are refused until it is held again", self.lease.lost())
        for session in self.sessions:
            harness = session.live_harness()
            if harness is None:
                continue
            if held:
                self.tasks.start(self._recheck, session, name=f"recheck {session.name}")
            else:
                self.sessions.emit(session, EventKind.UNCONFIRMED, harness, self.lease.lost())

    async def _recheck(self, session: Session) -> None:
        async with session.lock:
            harness = session.live_harness()
            if harness is None:
                return
            try:
                current = await self.store.current(session.name)
            except StoreUnavailable as exc:
                logger.warning("session %s: epoch not rechecked: %s", session.name, exc)
                return
            if current != harness.epoch:
                await self.harnesses.supersede(session, harness, current)
            else:
                self.sessions.emit(
                    session, EventKind.CONFIRMED, harness, "the host lease is held again"
                )


@attrs.define(eq=False)
class Takeover:
    """Takes over each session whose owner's lease ends, as the ownership watch reports it,
    and every ``lease_ttl`` those without an owner: a watch on a member that hangs, or one
    resumed past a compaction, reports nothing, so the rescan bounds a takeover at two TTLs."""

    settings: Settings
    store: LeasedEpochStore
    lease: SharedHost
    sessions: Sessions
    start: Callable[[str], Awaitable[object]]
    redeliver: Callable[..., Awaitable[None]]
    tasks: Tasks
    _taking: set[str] = attrs.field(factory=set, init=False)
    _ended: set[str] = attrs.field(factory=set, init=False)
    """Orphans found stopped or failed: not read again while they stay without an owner."""

    async def run(self, *, task_status: trio.TaskStatus[None]) -> None:
        watching = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, nursery, watching, name="agentd ownership watch")
            with trio.move_on_after(self.settings.start_timeout):
                await watching.wait()
            await self._take_orphans(nursery)
            task_status.started()
            while True:
                await trio.sleep(self.store.lease_ttl)
                if self.lease.confirmed():
                    await self._take_orphans(nursery)

    async def _watch(self, nursery: trio.Nursery, watching: trio.Event) -> None:
        while True:
            sender, released = channel(str, math.inf, name="released sessions")
            try:
                await nursery.start(self.store.watch_released, sender)
            except StoreUnavailable as exc:
                logger.warning("host %s: cannot watch owners: %s", self.lease.host, exc)
            else:
                watching.set()
                async for name in released:
                    nursery.start_soon(self._take, name, "its owner's lease ended")
            finally:
                released.close()
            await trio.sleep(self.settings.heartbeat)

    async def _take_orphans(self, nursery: trio.Nursery) -> None:
        try:
            orphans = await self.store.orphaned()
        except StoreUnavailable as exc:
            logger.warning("host %s: cannot list orphaned sessions: %s", self.lease.host, exc)
            return
        self._ended &= set(orphans)  # one that had an owner since is looked at anew
        for name in orphans:
            if name not in self._ended:
                nursery.start_soon(self._take, name, "it had no live owner")

    async def _take(self, name: str, why: str) -> None:
        if not valid_name(name) or name in self._taking:
            return  # the watch and the rescan may both report it
        self._taking.add(name)
        try:
            record = await self.store.record(name)
            if record is None or SessionState.from_record(record.state).settled:
                self._ended.add(name)
                return
            session = self.sessions.get(name)
            if session.live_harness() is not None:
                return
            detail = f"{why} (host {record.host}, epoch {record.epoch})"
            self.sessions.emit(session, EventKind.TAKEOVER, None, detail, epoch=record.epoch)
            await self.start(name)
            for queued in await self.store.pending():
                if queued.session == name:  # prompts follow the session to its new host
                    self.tasks.start(self.redeliver, queued, name=f"redeliver {queued.id}")
        except REFUSED as exc:
            logger.warning("session %s: not taken over: %s", name, exc)
        finally:
            self._taking.discard(name)
