"""``Agentd``: the daemon that starts one harness per session, reattaches to it while it is
healthy, replaces it when it is a phantom or dead, and never retries without end.

Every decision about a session happens under that session's lock, in ``start_agent``:

- a live harness of the current epoch whose connection loop answers a ping: reattach (Nudge);
- a harness that does not answer within ``miss_limit`` heartbeats of its last sign of life
  (a pong, its spawn, its adoption or its disconnection): a phantom; its tree is stopped
  (SIGINT, SIGTERM, SIGKILL) and reaped, and a fresh one is spawned with a new epoch;
- a harness of an older epoch (another daemon or host bumped it): told ``Superseded`` and
  stopped if it has not exited within ``grace``; then a fresh spawn;
- a dead harness or none: spawn (``spawned`` the first time, ``respawned`` after).

A harness is a phantom only on evidence that the daemon was not the late one: silence is
counted on the daemon's awake clock (time its own loop ran late is not counted), and a harness
found silent gets one more ping with a fresh deadline (and, if it is runnable but starved, one
more ``patience``) before it is declared a phantom; agentd then respawns it itself, within the
restart limit. Spawns run at most ``spawn_limit`` at a time, and the start timeout counts from
when a spawn's turn comes.

Harnesses are not owned by a ``ChildGroup``: the daemon's own restart must leave them running.
Their identity ``(pid, create_time, boot_id, epoch)`` is saved in the store, and a restarted
daemon adopts the live ones by identity and waits ``miss_limit`` heartbeats for them to
reconnect before calling them phantoms.

On a store shared by hosts (a ``LeasedEpochStore``: etcd), the daemon holds its host's lease
from a task of its own; it takes no work while the lease is not known alive (its sessions
show as ``unconfirmed``), and with ``adopt`` it takes over the sessions of hosts whose lease
ended.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import math
import os
import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import psutil
import trio

from ..channels import ChannelClosed, Receiver, channel
from ..epochs import (
    EpochStore,
    LeasedEpochStore,
    OwnedElsewhere,
    QueuedPrompt,
    SessionRecord,
    StoreUnavailable,
)
from ..epochs import Superseded as EpochSuperseded
from ..process import (
    Child,
    ProcessRef,
    SpawnError,
    become_subreaper,
    boot_id,
    find_twins,
    reap,
    reap_orphans,
    start,
    stop_tree,
    stop_trees,
)
from ..process._table import STORE_VAR
from ..wire import (
    Bye,
    Connection,
    Control,
    Error,
    FrameTooLarge,
    Hello,
    Message,
    Nudge,
    Pong,
    Prompt,
    ProtocolError,
    Reply,
    Superseded,
    Welcome,
    encode,
    serve,
)
from ._awake import AwakeClock
from ._events import AgentEvent, EventLog
from ._guard import Throttle, guarded
from ._link import Link
from ._outcomes import (
    AgentdError,
    Attached,
    Delivered,
    DeliveryFailed,
    How,
    PromptTooLarge,
    SessionFailed,
    SessionStatus,
    StartFailed,
    Unconfirmed,
)

logger = logging.getLogger("tether.agentd")

_REFUSED = (SessionFailed, StartFailed, Unconfirmed, OwnedElsewhere, StoreUnavailable, SpawnError)
"""Why ``start_agent`` can refuse: each names the session and the reason."""
_ANSWERED = (AgentdError, OwnedElsewhere, StoreUnavailable, SpawnError, ValueError)
"""What a control request can fail with, answered to its client as an ``Error``."""
REPLY_TIMEOUT = 5.0
"""Seconds a control client has to read its reply before its connection is closed."""

_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@attrs.define(eq=False)
class _Harness:
    """One harness process of a session, from its spawn (or adoption) to its exit."""

    ref: ProcessRef
    epoch: int
    child: Child | None
    """Our ``Child`` if this daemon started it; ``None`` if adopted after a restart."""
    since: float
    """Its last sign of life other than a pong: spawn, adoption, disconnection (trio time)."""
    link: Link | None = None
    linked: trio.Event = attrs.field(factory=trio.Event)
    """Set while ``link`` is attached; replaced when the link drops."""
    hello: trio.Event = attrs.field(factory=trio.Event)
    exited: trio.Event = attrs.field(factory=trio.Event)
    code: int | None = None
    retired: trio.Event | None = None
    judging: bool = False
    """Whether a task is making sure it is a phantom (the watchdog starts one at a time)."""


@attrs.define(eq=False)
class _Session:
    name: str
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    harness: _Harness | None = None
    state: str = "new"
    reason: str | None = None
    restarts: int = 0
    recent: collections.deque[float] = attrs.field(factory=collections.deque)
    """Trio times of the restarts inside the restart window."""
    known: bool = False
    """Whether a harness was ever recorded for it (the next spawn is then a restart)."""
    last_event: str = ""


class Agentd:
    """The session daemon.

    Args:
        store: where epochs, session records and queued prompts live.
        socket_path: the Unix socket harnesses and ``tether`` commands connect to (its
            directory must be mode 0700; see ``tether.wire.serve``).
        harness_argv: how to start a harness; it gets ``TETHER_SESSION``, ``TETHER_EPOCH``,
            ``TETHER_AGENTD`` (the socket), ``TETHER_STATE_DIR`` (``<state_dir>/<session>``) and
            ``TETHER_GRACE`` in its environment, which ``run_harness`` reads.
        heartbeat: seconds between pings to each attached harness.
        miss_limit: heartbeats without a pong (or without a connection) that make a phantom.
        restart_limit: ``(n, window)``: more than ``n`` restarts within ``window`` seconds
            fails the session until ``reset``.
        grace: each step of stopping a harness's tree (SIGINT, SIGTERM, SIGKILL).
        start_timeout: seconds a new harness has to say ``Hello``.
        delivery_attempts: how many times ``deliver`` tries, each through ``start_agent``.
        state_dir: sessions' directories and the event log (default: the socket's directory).
        env: the harnesses' base environment (default: this process's).
        reap_orphans: make this process a subreaper and reap every zombie child no ``Child``
            answers for (what ``tether agentd`` does; leave it off when embedding the daemon
            in a process whose other children are waited for elsewhere).
        adopt: on a ``LeasedEpochStore``, take over every session whose owner's lease ends
            (and those found without an owner at start and every ``lease_ttl``), instead of
            only when asked for one.
        spawn_limit: harnesses started at once (default: twice the CPUs); a start waiting
            its turn does not count against ``start_timeout``.
    """

    def __init__(
        self,
        store: EpochStore,
        socket_path: str | os.PathLike[str],
        harness_argv: Sequence[str],
        *,
        heartbeat: float = 1.0,
        miss_limit: int = 3,
        restart_limit: tuple[int, float] = (5, 60.0),
        grace: float = 2.0,
        start_timeout: float = 10.0,
        delivery_attempts: int = 3,
        state_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        reap_orphans: bool = False,
        adopt: bool = False,
        spawn_limit: int | None = None,
    ) -> None:
        if not harness_argv:
            raise ValueError("harness_argv must name a program")
        if heartbeat <= 0 or miss_limit < 1 or delivery_attempts < 1:
            raise ValueError("heartbeat, miss_limit and delivery_attempts must be positive")
        if start_timeout <= 0 or grace < 0:
            raise ValueError("start_timeout must be positive and grace not negative")
        if spawn_limit is None:
            spawn_limit = 2 * (os.cpu_count() or 1)
        if spawn_limit < 1:
            raise ValueError("spawn_limit must be at least 1")
        self.store = store
        self.socket_path = os.fspath(socket_path)
        self.harness_argv = tuple(harness_argv)
        self.heartbeat = heartbeat
        self.miss_limit = miss_limit
        self.restart_limit = restart_limit
        self.grace = grace
        self.start_timeout = start_timeout
        self.delivery_attempts = delivery_attempts
        self.state_dir = os.fspath(
            state_dir if state_dir is not None else os.path.dirname(self.socket_path)
        )
        self.env = dict(os.environ if env is None else env)
        self.reap_orphans = reap_orphans
        self.adopt = adopt
        self.spawn_limit = spawn_limit
        self.store_id: str | None = None
        """The store's id (``EpochStore.identity``), read at start: every harness carries it
        as ``TETHER_STORE_ID``, and sweeps touch only processes that do."""
        self._clock = AwakeClock()
        self._spawning = trio.CapacityLimiter(spawn_limit)
        self._throttle = Throttle()
        self._leased = store if isinstance(store, LeasedEpochStore) else None
        self.host = self._leased.host_id if self._leased is not None else None
        """The host id harnesses and records carry (``None`` on a single-host store)."""
        self._was_confirmed = True
        self.events = EventLog(None)
        self._sessions: dict[str, _Session] = {}
        self._taking: set[str] = set()
        self._ended: set[str] = set()
        self._nursery: trio.Nursery | None = None

    def __repr__(self) -> str:
        return f"<tether.Agentd {self.socket_path!r} sessions={len(self._sessions)}>"

    @property
    def exit_bound(self) -> float:
        """Seconds a superseded harness has to exit on its own: its documented bound, so the
        daemon never cuts short a clean exit (child agents stopped, calls sealed)."""
        return 2 * self.grace + 1

    @property
    def patience(self) -> float:
        """Seconds without a sign of life that make a harness a phantom."""
        return self.miss_limit * self.heartbeat

    # -- running ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(
        self, *, stop_harnesses: bool = False, log_path: str | os.PathLike[str] | None = None
    ) -> AsyncIterator[Agentd]:
        """Serve the socket, adopt the live harnesses the store records, redeliver queued
        prompts, and watch every harness until the block exits.

        Harnesses keep running when the block exits unless ``stop_harnesses``; a later daemon
        on the same store adopts them. Events go to ``log_path`` (default
        ``<state_dir>/agentd.events.jsonl``) as JSON lines.

        Raises:
            StoreInUse: another daemon serves this (single-host) store; it names the pid.
            StoreUnavailable: (perhaps in an exception group) the store was unreachable at
                start.
            HostIdInUse: (in an exception group) another daemon took this host's id; the block
                is cancelled and the daemon stands down.
        """
        if self._nursery is not None:
            raise RuntimeError("this Agentd is already running")
        async with self.store.exclusive():
            self.store_id = await self.store.identity()
            async with self._serving(stop_harnesses, log_path):
                yield self

    @contextlib.asynccontextmanager
    async def _serving(
        self, stop_harnesses: bool, log_path: str | os.PathLike[str] | None
    ) -> AsyncIterator[None]:
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.events = EventLog(
            log_path
            if log_path is not None
            else os.path.join(self.state_dir, "agentd.events.jsonl")
        )
        if self.reap_orphans:
            become_subreaper()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._leased is not None:
                    await nursery.start(self._leased.keep_alive)
                await self._adopt_all()
                await nursery.start(serve, self.socket_path, self._handle)
                nursery.start_soon(self._watchdog, name="agentd watchdog")
                if self._leased is not None:
                    nursery.start_soon(self._watch_lease, self._leased, name="agentd lease")
                if self.adopt and self._leased is not None:
                    await nursery.start(self._take_over_released, self._leased)
                for queued in await self.store.pending():
                    self._spawn_task(self._redeliver, queued, name=f"redeliver {queued.id}")
                try:
                    yield
                finally:
                    if stop_harnesses:
                        with trio.CancelScope(shield=True):
                            await self._stop_all()
                            if self._leased is not None:
                                with contextlib.suppress(StoreUnavailable):
                                    await self._leased.revoke()
                    if self.reap_orphans:
                        reap_orphans()
                    nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self.events.close()

    def subscribe(self, capacity: int = 1024) -> Receiver[AgentEvent]:
        """Every event from now on, on a channel of its own; close the receiver to stop."""
        return self.events.subscribe(capacity)

    def _spawn_task(self, fn: Any, *args: Any, name: str) -> None:
        """Start a task of one session's, ``guarded`` so that whatever it raises ends it
        alone, never the daemon."""
        if self._nursery is None:
            raise RuntimeError("the daemon is not running: use `async with agentd.running()`")
        self._nursery.start_soon(guarded, name, fn, *args, name=name)

    def _emit(
        self,
        session: _Session,
        kind: str,
        harness: _Harness | None = None,
        detail: str = "",
        *,
        epoch: int | None = None,
    ) -> None:
        event = AgentEvent(
            session.name,
            kind,
            epoch if epoch is not None else (harness.epoch if harness else None),
            harness.ref.pid if harness else None,
            detail,
        )
        session.last_event = kind if not detail else f"{kind}: {detail}"
        self.events.emit(event)

    def _session(self, name: str) -> _Session:
        session = self._sessions.get(name)
        if session is None:
            if not _SESSION_NAME.fullmatch(name):
                raise ValueError(
                    f"session name {name!r}: use 1 to 128 letters, digits, '.', '_' or '-',"
                    " starting with a letter or digit"
                )
            session = self._sessions[name] = _Session(name)
        return session

    # -- adoption after a restart -----------------------------------------------------------

    async def _adopt_all(self) -> None:
        for name in await self.store.sessions():
            record = await self.store.record(name)
            if record is None or not _SESSION_NAME.fullmatch(name):
                continue
            session = self._session(name)
            session.known = True
            session.restarts = record.restarts
            session.state = record.state
            session.reason = record.reason
            if record.host != self.host:
                session.state = "elsewhere"
                session.reason = session.last_event = f"host {record.host} wrote its record"
                continue
            if record.pid is None or record.create_time is None or record.epoch is None:
                continue
            ref = _identify(record)
            if ref is None:
                _reap_recorded(record)
                self._spawn_task(self._sweep, session, record.epoch, name=f"sweep {name}")
                session.state = (
                    "dead" if record.state not in ("failed", "stopped") else record.state
                )
                self._emit(
                    session,
                    "exited",
                    epoch=record.epoch,
                    detail=f"pid {record.pid} is gone (found dead after a restart)",
                )
                continue
            harness = _Harness(ref, record.epoch, None, since=self._clock.now())
            if self._leased is not None and not await self._leased.claim(name, record.epoch):
                self._emit(session, "superseded", harness, "another host took it over")
                self._spawn_task(self._confirm_exit, session, harness, name=f"superseded {name}")
                continue
            session.harness = harness
            if record.state not in ("failed",):
                session.state = "disconnected"
            self._emit(
                session, "adopted", harness, f"waiting {self.patience:.1f}s for it to reconnect"
            )
            self._spawn_task(self._watch_exit, session, harness, name=f"watch {name}")

    # -- the host lease and takeover (shared stores) -----------------------------------------

    def confirmed(self) -> bool:
        """Whether this daemon knows it still owns its sessions: always, on a single-host
        store; while its host lease is known alive, on a shared one."""
        return self._leased is None or self._leased.lease_held()

    def _lease_lost(self) -> str:
        return f"host {self.host} lost its lease on the store; its sessions are unconfirmed"

    async def _watch_lease(self, store: LeasedEpochStore) -> None:
        """Check the lease once a heartbeat, and the moment it would run out: the daemon
        refuses work from then on, and its ``unconfirmed`` events carry that moment."""
        while True:
            remaining = store.lease_remaining()
            await trio.sleep(min(self.heartbeat, remaining + 0.001 if remaining else math.inf))
            self._check_lease()

    def _check_lease(self) -> None:
        """Say when the lease is lost; once it is held again, confirm each session whose epoch
        is still ours and supersede the harness of each that another host bumped meanwhile."""
        held = self.confirmed()
        if held == self._was_confirmed:
            return
        self._was_confirmed = held
        if not held:
            logger.error("%s; deliveries are refused until it is held again", self._lease_lost())
        for session in list(self._sessions.values()):
            harness = session.harness
            if harness is None or harness.exited.is_set():
                continue
            if held:
                self._spawn_task(self._recheck, session, name=f"recheck {session.name}")
            else:
                self._emit(session, "unconfirmed", harness, self._lease_lost())

    async def _recheck(self, session: _Session) -> None:
        async with session.lock:
            harness = session.harness
            if harness is None or harness.exited.is_set():
                return
            try:
                current = await self.store.current(session.name)
            except StoreUnavailable as exc:
                logger.warning("session %s: epoch not rechecked: %s", session.name, exc)
                return
            if current != harness.epoch:
                await self._supersede(session, harness, current)
            else:
                self._emit(session, "confirmed", harness, "the host lease is held again")

    async def _take_over_released(
        self, store: LeasedEpochStore, *, task_status: trio.TaskStatus[None]
    ) -> None:
        """Take over each session whose owner's lease ends, as the watch reports it, and every
        ``lease_ttl`` those without an owner: a watch on a member that hangs, or one resumed
        past a compaction, reports nothing, so the rescan bounds a takeover at two TTLs."""
        watching = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    sender, released = channel(str, math.inf, name="released sessions")
                    try:
                        await nursery.start(store.watch_released, sender)
                    except StoreUnavailable as exc:
                        logger.warning("host %s: cannot watch owners: %s", self.host, exc)
                    else:
                        watching.set()
                        async for name in released:
                            nursery.start_soon(self._take, name, "its owner's lease ended")
                    finally:
                        released.close()
                    await trio.sleep(self.heartbeat)

            nursery.start_soon(watch, name="agentd ownership watch")
            with trio.move_on_after(self.start_timeout):
                await watching.wait()
            await self._take_orphans(store, nursery)
            task_status.started()
            while True:
                await trio.sleep(store.lease_ttl)
                if self.confirmed():
                    await self._take_orphans(store, nursery)

    async def _take_orphans(self, store: LeasedEpochStore, nursery: trio.Nursery) -> None:
        try:
            orphans = await store.orphaned()
        except StoreUnavailable as exc:
            logger.warning("host %s: cannot list orphaned sessions: %s", self.host, exc)
            return
        self._ended &= set(orphans)  # one that had an owner since is looked at anew
        for name in orphans:
            if name not in self._ended:
                nursery.start_soon(self._take, name, "it had no live owner")

    async def _take(self, name: str, why: str) -> None:
        if not _SESSION_NAME.fullmatch(name) or name in self._taking:
            return  # the watch and the rescan may both report it
        self._taking.add(name)
        try:
            record = await self.store.record(name)
            if record is None or record.state in ("stopped", "failed"):
                self._ended.add(name)  # not read again while it stays without an owner
                return
            session = self._session(name)
            if session.harness is not None and not session.harness.exited.is_set():
                return
            self._emit(
                session,
                "takeover",
                None,
                f"{why} (host {record.host}, epoch {record.epoch})",
                epoch=record.epoch,
            )
            await self.start_agent(name)
            for queued in await self.store.pending():
                if queued.session == name:  # prompts follow the session to its new host
                    self._spawn_task(self._redeliver, queued, name=f"redeliver {queued.id}")
        except _REFUSED as exc:
            logger.warning("session %s: not taken over: %s", name, exc)
        finally:
            self._taking.discard(name)

    # -- connections ------------------------------------------------------------------------

    async def _handle(self, connection: Connection) -> None:
        """One connection, from its first frame to its close. Whatever it meets ends it
        alone: a bad frame is refused (``serve`` answers ``ProtocolError``), anything else is
        logged as a bug and the connection closed, and the daemon serves on."""
        try:
            await self._converse(connection)
        except (ProtocolError, ChannelClosed):
            raise
        except Exception:  # one connection's bug must not end the daemon
            logger.exception("connection of pid %d failed; closing it", connection.peer.pid)
            await connection.refuse(ProtocolError("agentd failed on this request; see its log"))

    async def _converse(self, connection: Connection) -> None:
        with trio.move_on_after(self.start_timeout) as first:
            message = await connection.receive()
        if first.cancelled_caught:
            raise ProtocolError(f"no first message within {self.start_timeout:.1f}s")
        if isinstance(message, Control):
            await self._control(connection, message)
        elif isinstance(message, Hello):
            try:
                await self._harness_connection(connection, message)
            except StoreUnavailable as exc:  # the harness retries; its loop has a bound
                raise ProtocolError(f"cannot check the epoch now: {exc}") from None
        else:
            raise ProtocolError(
                f"the first message must be hello or control, not {type(message).__name__}"
            )

    async def _harness_connection(self, connection: Connection, hello: Hello) -> None:
        if hello.pid != connection.peer.pid:
            raise ProtocolError(
                f"hello names pid {hello.pid} but the peer is pid {connection.peer.pid}"
            )
        try:
            session = self._session(hello.session)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        try:
            ref = ProcessRef.of(hello.pid)
        except ProcessLookupError:
            return
        current = await self.store.current(session.name)
        harness = session.harness
        if (
            current == hello.epoch
            and (harness is None or harness.exited.is_set())
            and ref.is_alive()
        ):
            # The holder of the current epoch, which this daemon has lost track of (its record
            # was overwritten, or a stop did not take): it is the session's harness.
            harness = session.harness = _Harness(ref, hello.epoch, None, self._clock.now())
            self._emit(session, "adopted", harness, "it said hello with the current epoch")
            self._spawn_task(self._watch_exit, session, harness, name=f"watch {session.name}")
        refusal = None
        if current != hello.epoch:
            refusal = f"current epoch is {current}"
        elif harness is None or harness.ref != ref:
            refusal = f"another harness holds epoch {current}"
        elif harness.retired is not None:
            refusal = "it is being stopped"
        if refusal is not None:
            await _send_within(connection, Superseded(session.name, hello.epoch, current or 0))
            stale = _Harness(ref, hello.epoch, None, since=self._clock.now())
            self._emit(session, "superseded", stale, refusal)
            if harness is None or harness.ref != ref or harness.retired is None:
                self._spawn_task(self._confirm_exit, session, stale, name=f"superseded {ref.pid}")
            return
        assert harness is not None
        old = harness.link
        if old is not None:  # it reconnected before we saw the old connection drop
            old.close()
            await old.connection.aclose()
        link = Link(connection, ref, hello.epoch, self._clock)
        if not await link.send(Welcome(session.name, hello.epoch, self.heartbeat)):
            return
        harness.link = link
        harness.linked.set()
        session.state = "attached"
        first_hello = not harness.hello.is_set()
        harness.hello.set()
        self._emit(session, "attached", harness, "" if first_hello else "reconnected")
        try:
            with link.reading:
                await self._read(link)
        finally:
            link.close()
            link.detached.set()
            if harness.link is link:
                harness.link = None
                harness.linked = trio.Event()
                harness.since = self._clock.now()
                if not harness.exited.is_set() and harness.retired is None:
                    session.state = "disconnected"
                    self._emit(session, "detached", harness)

    async def _read(self, link: Link) -> None:
        async for message in link.connection:
            if isinstance(message, Pong):
                link.pong(message.seq)
            elif isinstance(message, Bye):
                return
            elif isinstance(message, Error):
                logger.warning("harness pid %d refused a frame: %s", link.ref.pid, message.reason)
                return
            else:
                raise ProtocolError(f"unexpected {type(message).__name__} from a harness")

    # -- the watchdog -----------------------------------------------------------------------

    async def _watchdog(self) -> None:
        """Once a heartbeat, for every session: ping each attached harness, and have each one
        silent for ``patience`` (or live and unconnected that long) judged; reap orphans if
        we own them.

        It wakes at a known deadline, so how late it runs is how long the daemon itself was
        away: that time goes to the awake clock and counts against no harness. One task ticks
        for all sessions, so an idle daemon wakes once per heartbeat plus once per pong,
        however many sessions it holds.
        """
        due = trio.current_time() + self.heartbeat
        while True:
            await trio.sleep_until(due)
            late = self._clock.woke(due)
            if late > self.heartbeat:
                logger.warning(
                    "agentd ran %.1fs late (stopped, or starved of CPU); harnesses are not"
                    " blamed for it",
                    late,
                )
            try:
                await self._tick()
            except Exception:  # the watchdog must outlive any one bad tick
                logger.exception("agentd watchdog tick failed; the next one follows")
            due = trio.current_time() + self.heartbeat

    async def _tick(self) -> None:
        now = self._clock.now()
        for session in list(self._sessions.values()):
            harness = session.harness
            if (
                harness is None
                or harness.retired is not None
                or harness.exited.is_set()
                or harness.judging
            ):
                continue
            link = harness.link
            if link is not None and not link.closed:
                if link.silence() <= self.patience:
                    # Only a full socket buffer blocks: a harness that stopped reading.
                    with trio.move_on_after(self.heartbeat / 4):
                        await link.ping()
                    continue
            elif not (_awaiting_connection(harness) and now - harness.since > self.patience):
                continue
            harness.judging = True
            self._spawn_task(self._judge, session, harness, name=f"judge {session.name}")
        if self.reap_orphans:
            try:
                for pid, code in reap_orphans():
                    logger.info("reaped orphan pid %d (exit status %d)", pid, code)
            except OSError as exc:  # EMFILE and friends: the next tick tries again
                self._throttle.warn("reap", "cannot reap orphans now: %s", exc)

    def _silence(self, harness: _Harness) -> float:
        """Awake seconds since the harness's last sign of life (a pong, its spawn, its
        adoption, its disconnection)."""
        last = harness.since
        if harness.link is not None:
            last = max(last, harness.link.last_pong)
        return self._clock.now() - last

    async def _answers(self, harness: _Harness, window: float) -> bool:
        """Whether the harness's loop answers a ping within ``window`` (waiting for it to
        connect meanwhile). A window during which the daemon itself ran late is given again
        (twice at most); a harness that is runnable but starved of CPU (``/proc`` state
        ``R``) gets one more ``patience``. Bounded by ``3 * window + patience``."""
        for _ in range(3):
            lag = self._clock.lag
            with trio.move_on_after(window):
                return await self._ping_until_answered(harness)
            if self._clock.lag - lag < window / 2:
                break
        if harness.ref.state() == "R":
            logger.info(
                "harness pid %d is runnable but silent: giving it %.1fs more",
                harness.ref.pid,
                self.patience,
            )
            with trio.move_on_after(self.patience):
                return await self._ping_until_answered(harness)
        return False

    async def _ping_until_answered(self, harness: _Harness) -> bool:
        while not harness.exited.is_set() and harness.retired is None:
            link = harness.link
            if link is None:
                await harness.linked.wait()
            elif link.closed:
                await link.detached.wait()
            elif await link.roundtrip():
                return True
        await trio.lowlevel.checkpoint()
        return False

    async def _judge(self, session: _Session, harness: _Harness) -> None:
        """Make sure a silent harness is a phantom before saying so: a confirming ping with a
        fresh deadline (``_answers``). A phantom's tree is stopped and reaped, and the session
        respawned, within its restart limit."""
        try:
            if await self._answers(harness, self.heartbeat):
                logger.info(
                    "session %s: harness pid %d answered the confirming ping",
                    session.name,
                    harness.ref.pid,
                )
                return
            detail = self._why_phantom(harness)
            async with session.lock:
                if session.harness is not harness or harness.retired is not None:
                    return
                if harness.exited.is_set():
                    return
                self._emit(session, "phantom", harness, detail)
                await self._retire(session, harness, "phantom")
                await self._respawn(session)
        finally:
            harness.judging = False

    def _why_phantom(self, harness: _Harness) -> str:
        silence = self._silence(harness)
        if harness.link is not None:
            return (
                f"no pong for {silence:.1f}s ({self.miss_limit} heartbeats and a confirming"
                " ping)"
            )
        return f"no connection for {silence:.1f}s"

    async def _respawn(self, session: _Session) -> None:
        """Start a fresh harness for a session whose harness was a phantom (the session lock
        is held); a refusal (the restart limit, a lost lease) is logged and stands."""
        if session.state in ("failed", "stopped") or not self.confirmed():
            return
        try:
            await self._spawn(session, "respawned")
        except _REFUSED as exc:
            logger.warning("session %s: not respawned after a phantom: %s", session.name, exc)

    async def _watch_exit(self, session: _Session, harness: _Harness) -> None:
        """Wait for the harness to exit (through its pidfd if ours, else by polling its
        identity), reap it, record the code and say so."""
        if harness.child is not None:
            harness.code = await harness.child.wait()
        else:
            await _wait_gone(harness.ref, self.heartbeat)
            harness.code = reap(harness.ref)
        harness.exited.set()
        link = harness.link
        if link is not None:
            link.close()
            with contextlib.suppress(trio.ClosedResourceError):
                await link.connection.aclose()
        if session.harness is harness and harness.retired is None:
            session.state = "dead"
            with trio.CancelScope(shield=True):
                await self._save(session, harness, state="exited", pid=None)
                await self._sweep(session, harness.epoch)
        code = "unknown (not our child)" if harness.code is None else str(harness.code)
        self._emit(session, "exited", harness, f"code {code}")

    async def _sweep(self, session: _Session, epoch: int) -> None:
        """Stop what a dead harness left behind: processes still marked with its epoch, its
        host and this store (another daemon's harness of the same name is not ours)."""
        try:
            left = set(find_twins(session.name, epoch=epoch, host=self.host, store=self.store_id))
        except OSError as exc:  # EMFILE and friends: logged, never fatal
            self._throttle.warn("sweep", "session %s: cannot sweep now: %s", session.name, exc)
            return
        if left:
            logger.warning(
                "session %s: stopping %d processes left by epoch %d",
                session.name,
                len(left),
                epoch,
            )
            await stop_trees(left, self.grace)

    async def _retire(self, session: _Session, harness: _Harness, why: str) -> None:
        """Stop the harness's tree and reap it; idempotent, and every caller waits for it."""
        if harness.retired is not None:
            await harness.retired.wait()
            return
        harness.retired = trio.Event()
        with trio.CancelScope(shield=True):
            link = harness.link
            if link is not None:
                link.close()
                with contextlib.suppress(trio.ClosedResourceError):
                    await link.connection.aclose()
            if not harness.exited.is_set():
                logger.info(
                    "session %s: stopping harness pid %d (%s)", session.name, harness.ref.pid, why
                )
                survivors = await stop_tree(harness.ref, self.grace)
                for survivor in survivors:
                    logger.error("session %s: %s survived", session.name, survivor.describe())
                with trio.move_on_after(1.0):
                    await harness.exited.wait()
            await self._sweep(session, harness.epoch)
            if session.harness is harness:
                session.state = "dead"
                await self._save(session, harness, state="exited", pid=None)
            harness.retired.set()

    async def _confirm_exit(self, session: _Session, stale: _Harness) -> None:
        """A superseded harness must exit within ``grace``; if not, its tree is stopped (never
        this process's own tree: a peer that is our ancestor is only told)."""
        if _is_self_or_ancestor(stale.ref.pid):
            logger.warning(
                "session %s: pid %d is this daemon or its ancestor; not stopping it",
                session.name,
                stale.ref.pid,
            )
            return
        with trio.move_on_after(self.exit_bound):
            await _wait_gone(stale.ref, 0.02)
        if stale.ref.is_alive():
            self._emit(
                session,
                "superseded",
                stale,
                f"still alive after {self.exit_bound:.1f}s; stopping it",
            )
            await stop_tree(stale.ref, self.grace)
        if session.harness is not None and session.harness.ref == stale.ref:
            return  # its own watcher reports the exit
        code = reap(stale.ref)
        self._emit(
            session, "exited", stale, f"code {'unknown (not our child)' if code is None else code}"
        )

    # -- the decision -----------------------------------------------------------------------

    async def start_agent(self, session_name: str) -> Attached:
        """Make sure the session has one healthy harness attached; say how.

        Bounded by ``3 * patience + 3 * heartbeat + 2 * grace + 1 + start_timeout`` seconds
        once a spawn's turn comes (``spawn_limit``): a silent harness is given its patience,
        a confirming window and, if it is runnable but starved, one more patience.

        Raises:
            SessionFailed: the session hit its restart limit (until ``reset``).
            StartFailed: a fresh harness never said ``Hello``; it was stopped.
            SpawnError: the harness program cannot be executed.
            RuntimeError: the daemon is not running.
        """
        return await self._start(self._session(session_name), nudge=True)

    async def _start(self, session: _Session, *, nudge: bool) -> Attached:
        if self._nursery is None:
            raise RuntimeError("the daemon is not running: use `async with agentd.running()`")
        async with session.lock:
            if session.state == "failed":
                raise SessionFailed(session.name, session.reason or "failed")
            if not self.confirmed():
                raise Unconfirmed(session.name, self._lease_lost())
            harness = session.harness
            if harness is not None and not harness.exited.is_set():
                current = await self.store.current(session.name)
                if harness.epoch != current:
                    await self._supersede(session, harness, current)
                elif await self._healthy(harness):
                    assert harness.link is not None
                    if not nudge:  # a prompt follows, which is nudge enough
                        return Attached(session.name, harness.ref.pid, harness.epoch, "reattached")
                    if await harness.link.send(Nudge()):
                        self._emit(session, "reattached", harness)
                        return Attached(session.name, harness.ref.pid, harness.epoch, "reattached")
                else:
                    if harness.retired is None:
                        self._emit(
                            session,
                            "phantom",
                            harness,
                            f"no answer within {self.patience:.1f}s of its last sign of life",
                        )
                    await self._retire(session, harness, "phantom")
            return await self._spawn(session, "respawned" if session.known else "spawned")

    async def _healthy(self, harness: _Harness) -> bool:
        """Whether the harness's loop answers a ping before ``patience`` passes (on the awake
        clock) since its last sign of life, and at least a heartbeat from now; waits for a
        reconnect meanwhile."""
        window = max(self.patience - self._silence(harness), self.heartbeat)
        return await self._answers(harness, window)

    async def _supersede(self, session: _Session, harness: _Harness, current: int | None) -> None:
        link = harness.link
        if link is not None:
            await link.send(Superseded(session.name, harness.epoch, current or 0))
        self._emit(session, "superseded", harness, f"current epoch is {current}")
        with trio.move_on_after(self.exit_bound):
            await harness.exited.wait()
        await self._retire(session, harness, "superseded")

    async def _spawn(self, session: _Session, how: How) -> Attached:
        epoch = await self.store.bump(session.name)  # first: a refused bump is no restart
        if how == "respawned":
            self._count_restart(session)
        async with self._spawning:  # the start timeout counts from here
            return await self._spawn_now(session, how, epoch)

    async def _spawn_now(self, session: _Session, how: How, epoch: int) -> Attached:
        directory = os.path.join(self.state_dir, session.name)
        env = {
            **self.env,
            "TETHER_SESSION": session.name,
            "TETHER_EPOCH": str(epoch),
            "TETHER_AGENTD": self.socket_path,
            "TETHER_STATE_DIR": directory,
            "TETHER_GRACE": str(self.grace),
        }
        if self.host is not None:
            env["TETHER_HOST"] = self.host
        if self.store_id is not None:
            env[STORE_VAR] = self.store_id
        try:
            child = await self._start_harness(directory, env)
        except SpawnError as exc:
            self._emit(session, "spawn_failed", None, str(exc), epoch=epoch)
            raise
        harness = _Harness(child.ref, epoch, child, since=self._clock.now())
        session.harness = harness
        session.known = True
        session.state = "starting"
        self._spawn_task(self._watch_exit, session, harness, name=f"watch {session.name}")
        await self._save(session, harness, state="starting")
        self._emit(session, how, harness)
        with trio.move_on_after(self.start_timeout):
            async with trio.open_nursery() as race:
                race.start_soon(_set_after, harness.hello, race.cancel_scope)
                race.start_soon(_set_after, harness.exited, race.cancel_scope)
        if harness.hello.is_set() and not harness.exited.is_set():
            await self._save(session, harness, state="running")
            return Attached(session.name, harness.ref.pid, epoch, how)
        if harness.exited.is_set():
            reason = f"the harness exited with code {harness.code} before saying hello"
        else:
            reason = f"the harness did not say hello within {self.start_timeout:.1f}s"
        self._emit(session, "spawn_failed", harness, reason)
        await self._retire(session, harness, "no hello")
        raise StartFailed(session.name, reason)

    async def _start_harness(self, directory: str, env: dict[str, str]) -> Child:
        """Start the harness program with its log as stdout and stderr.

        Raises:
            SpawnError: it cannot be executed, or its directory or log cannot be opened
                (a full disk, a descriptor limit).
        """
        path = os.path.join(directory, "harness.log")
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            code = exc.errno or errno.EIO
            detail = f"cannot open {path}: {os.strerror(code)}"
            raise SpawnError(self.harness_argv[0], code, detail) from exc
        try:
            return await start(
                self.harness_argv, env=env, name="harness", grace=self.grace, output=log
            )
        finally:
            os.close(log)

    def _count_restart(self, session: _Session) -> None:
        limit, window = self.restart_limit
        now = trio.current_time()
        while session.recent and now - session.recent[0] > window:
            session.recent.popleft()
        if len(session.recent) >= limit:
            reason = f"restart limit: more than {limit} restarts in {window:g}s"
            session.state = "failed"
            session.reason = reason
            self._emit(session, "failed", session.harness, reason)
            self._spawn_task(self._save_failed, session, name="save failed")
            raise SessionFailed(session.name, reason)
        session.recent.append(now)
        session.restarts += 1

    async def _save_failed(self, session: _Session) -> None:
        await self._save(session, None, state="failed", pid=None)

    async def _save(
        self,
        session: _Session,
        harness: _Harness | None,
        *,
        state: str,
        pid: int | None = -1,
        quiet: bool = True,
    ) -> None:
        keep = harness is not None and pid == -1
        record = SessionRecord(
            pid=harness.ref.pid if keep and harness else None,
            create_time=harness.ref.create_time if keep and harness else None,
            boot_id=boot_id(),
            state=state,
            restarts=session.restarts,
            reason=session.reason,
            host=self.host,
        )
        try:
            if harness is not None:
                epoch = harness.epoch
            else:
                epoch = await self.store.current(session.name) or 0
            await self.store.save(session.name, record, epoch=epoch)
        except (EpochSuperseded, OwnedElsewhere, StoreUnavailable) as exc:
            # A newer epoch, or another host, wrote it: theirs stands. An unreachable store
            # loses this record only (the next save writes the whole state again).
            if not quiet and not isinstance(exc, EpochSuperseded):
                raise
            logger.log(
                logging.WARNING if isinstance(exc, StoreUnavailable) else logging.INFO,
                "session %s: record not saved: %s",
                session.name,
                exc,
            )

    # -- delivery ---------------------------------------------------------------------------

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered:
        """Queue ``prompt`` durably, then hand it to the session's harness, starting or
        replacing it through ``start_agent``, at most ``delivery_attempts`` times.

        A prompt counts as delivered once the harness's connection loop has read it (a ping
        sent after it was answered). Delivery is at least once: after a daemon crash, queued
        prompts are sent again with the same ``id``.

        Raises:
            PromptTooLarge: its frame would exceed ``tether.wire.MAX_FRAME``; it was not
                queued.
            ValueError: its ``meta`` cannot be framed (nested too deep, an integer beyond
                64 bits); it was not queued.
            DeliveryFailed: naming every attempt and why it failed.
        """
        if isinstance(prompt, str):
            prompt = Prompt(uuid.uuid4().hex, prompt, {})
        _check_framable(session_name, prompt)  # first: a refused prompt touches nothing
        session = self._session(session_name)
        if not self.confirmed():
            error = DeliveryFailed(session.name, prompt.id, [f"not accepted: {self._lease_lost()}"])
            self._emit(session, "delivery_failed", None, error.reason)
            raise error
        try:
            await self.store.enqueue(
                QueuedPrompt(session.name, prompt.id, prompt.text, prompt.meta)
            )
        except StoreUnavailable as exc:
            raise DeliveryFailed(session.name, prompt.id, [f"not queued: {exc}"]) from None
        failures: list[str] = []
        for attempt in range(1, self.delivery_attempts + 1):
            with contextlib.suppress(StoreUnavailable):
                await self.store.attempted(session.name, prompt.id)
            outcome = await self._attempt(session, prompt)
            if isinstance(outcome, Attached):
                self._emit(
                    session, "delivered", session.harness, f"prompt {prompt.id} attempt {attempt}"
                )
                try:
                    await self.store.settle(session.name, prompt.id, "delivered")
                except StoreUnavailable as exc:  # delivered all the same; redelivered later
                    logger.warning(
                        "session %s: prompt %s not settled: %s", session.name, prompt.id, exc
                    )
                return Delivered(session.name, prompt.id, outcome.pid, outcome.epoch, attempt)
            failures.append(f"attempt {attempt}: {outcome}")
            self._emit(
                session,
                "delivery_attempt",
                session.harness,
                f"prompt {prompt.id} attempt {attempt} failed: {outcome}",
            )
            if session.state == "failed" or not self.confirmed() or isinstance(outcome, _Final):
                break
        error = DeliveryFailed(session.name, prompt.id, failures)
        self._emit(session, "delivery_failed", None, error.reason)
        with contextlib.suppress(StoreUnavailable):
            await self.store.settle(session.name, prompt.id, f"failed: {error.reason}")
        raise error

    async def _attempt(self, session: _Session, prompt: Prompt) -> Attached | str | _Final:
        try:
            attached = await self._start(session, nudge=False)
        except (SessionFailed, StartFailed, SpawnError, Unconfirmed) as exc:
            return str(exc)
        except (OwnedElsewhere, StoreUnavailable) as exc:
            return _Final(str(exc))
        harness = session.harness
        link = harness.link if harness is not None else None
        if link is None:
            return "the harness lost its connection before the prompt was sent"
        with trio.move_on_after(self.patience):
            if await link.send(prompt) and await link.roundtrip():
                return attached
            return "the connection closed before the harness read the prompt"
        return f"the harness did not confirm the prompt within {self.patience:.1f}s"

    async def _redeliver(self, queued: QueuedPrompt) -> None:
        """Deliver a prompt queued before a restart or a takeover, unless its session belongs
        to another live host (the prompt stays queued for that host)."""
        prompt = Prompt(queued.id, queued.text, queued.meta)
        try:
            _check_framable(queued.session, prompt)
        except ValueError as exc:  # queued by an older version: it could never be sent
            logger.error(  # noqa: TRY400 - the reason is the whole story
                "session %s: queued prompt %s dropped: %s", queued.session, queued.id, exc
            )
            with contextlib.suppress(StoreUnavailable):
                await self.store.settle(queued.session, queued.id, f"failed: {exc}")
            return
        with contextlib.suppress(DeliveryFailed, ValueError, StoreUnavailable):
            if self._leased is not None:
                owner = await self._leased.owner(queued.session)
                if owner is not None and owner != self.host:
                    return
            await self.deliver(queued.session, prompt)

    # -- stop, reset, status ----------------------------------------------------------------

    async def stop_agent(self, session_name: str) -> None:
        """Stop the session's harness tree (SIGINT first, so it seals its calls) and record
        the session as ``stopped``. Bounded by ``2 * grace + 2`` seconds.

        Raises:
            OwnedElsewhere: another host owns the session (its record is left as it is).
        """
        session = self._session(session_name)
        async with session.lock:
            harness = session.harness
            if harness is not None and not harness.exited.is_set():
                await self._retire(session, harness, "stopped by request")
            await self._save(session, harness, state="stopped", pid=None, quiet=False)
            session.state = "stopped"
            self._emit(session, "stopped", harness)

    async def reset(self, session_name: str) -> None:
        """Clear a failed session's failure and its restart count.

        Raises:
            OwnedElsewhere: another host owns the session (its record is left as it is).
        """
        session = self._session(session_name)
        async with session.lock:
            session.recent.clear()
            session.reason = None
            state = "stopped" if session.state == "failed" else session.state
            await self._save(session, None, state=state, pid=None, quiet=False)
            session.state = state
            self._emit(session, "reset")

    def status(self) -> list[SessionStatus]:
        """One row per session, sorted by name; while the host lease is not known alive,
        every session this daemon runs is ``unconfirmed``, never healthy."""
        rows = []
        for name in sorted(self._sessions):
            session = self._sessions[name]
            harness = session.harness
            alive = harness is not None and not harness.exited.is_set()
            link = harness.link if harness is not None else None
            state = session.state
            if not self.confirmed() and state not in ("stopped", "failed", "elsewhere"):
                state = "unconfirmed"
            rows.append(
                SessionStatus(
                    session=name,
                    state=state,
                    epoch=harness.epoch if harness is not None else None,
                    pid=harness.ref.pid if alive and harness is not None else None,
                    heartbeat_age=round(link.silence(), 3) if link is not None else None,
                    restarts=session.restarts,
                    last_event=session.last_event,
                )
            )
        return rows

    def attached(self) -> dict[str, int]:
        """Session name to the pid of its attached harness, for every attached session."""
        return {
            name: session.harness.ref.pid
            for name, session in self._sessions.items()
            if session.harness is not None and session.harness.link is not None
        }

    async def _stop_all(self) -> None:
        async def stop(name: str) -> None:
            try:
                await self.stop_agent(name)
            except (OwnedElsewhere, StoreUnavailable) as exc:  # stopped, not recorded
                logger.warning("session %s: %s", name, exc)

        async with trio.open_nursery() as nursery:
            for session in self._sessions.values():
                if session.harness is not None and not session.harness.exited.is_set():
                    nursery.start_soon(stop, session.name)

    # -- the control protocol ---------------------------------------------------------------

    async def _control(self, connection: Connection, request: Control) -> None:
        try:
            result = await self._run_control(request)
        except _ANSWERED as exc:
            await _send_within(connection, Error(str(exc)))
            return
        try:
            reply: Message = Reply(result)
            encode(reply)
        except ProtocolError as exc:  # a reply too large to frame is refused, not sent
            reply = Error(f"the {request.op} reply cannot be sent: {exc.reason}")
        await _send_within(connection, reply)

    async def _run_control(self, request: Control) -> dict[str, Any]:
        if request.op == "ps":
            return {"sessions": [row.to_json() for row in self.status()]}
        if request.op == "start":
            return attrs.asdict(await self.start_agent(request.session))
        if request.op == "send":
            return attrs.asdict(await self.deliver(request.session, request.text))
        if request.op == "stop":
            await self.stop_agent(request.session)
            return {"session": request.session, "state": "stopped"}
        if request.op == "reset":
            await self.reset(request.session)
            return {"session": request.session, "state": "reset"}
        raise ProtocolError(f"unknown control op {request.op!r}")


@attrs.frozen
class _Final:
    """A failed delivery attempt that another attempt cannot mend (the session belongs to
    another host, or the store is unreachable)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def _awaiting_connection(harness: _Harness) -> bool:
    """A live harness that ought to be connected and is not (one we just spawned has the
    start timeout instead, and one being retired is already dealt with)."""
    if harness.exited.is_set() or harness.retired is not None or harness.link is not None:
        return False
    return harness.hello.is_set() or harness.child is None


async def _wait_gone(ref: ProcessRef, cap: float) -> None:
    """Poll until ``ref`` has exited (gone, or a zombie), backing off up to ``cap`` seconds."""
    delay = 0.005
    while ref.state() not in (None, "Z"):
        await trio.sleep(delay)
        delay = min(delay * 2, cap)


def _is_self_or_ancestor(pid: int) -> bool:
    ancestor: int | None = os.getpid()
    while ancestor:
        if ancestor == pid:
            return True
        try:
            ancestor = psutil.Process(ancestor).ppid()
        except psutil.Error:
            return False
    return False


def _reap_recorded(record: SessionRecord) -> None:
    """Reap the recorded harness if it is our zombie (a daemon restarted in-process)."""
    if record.pid is None or record.create_time is None:
        return
    try:
        ref = ProcessRef.of(record.pid)
    except ProcessLookupError:
        return
    if math.isclose(ref.create_time, record.create_time, abs_tol=1e-6):
        reap(ref)


def _identify(record: SessionRecord) -> ProcessRef | None:
    """The recorded harness, if the very same process still runs (same boot, pid and
    creation time); ``None`` otherwise."""
    if record.pid is None or record.boot_id != boot_id():
        return None
    try:
        ref = ProcessRef.of(record.pid)
    except ProcessLookupError:
        return None
    if not math.isclose(ref.create_time, record.create_time or 0.0, abs_tol=1e-6):
        return None
    return ref if ref.is_alive() else None


async def _set_after(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _send_within(connection: Connection, message: Message) -> None:
    """Send ``message`` unless the peer leaves it unread for ``REPLY_TIMEOUT``: a client that
    never reads pins no task and no descriptor (its connection is closed)."""
    with trio.move_on_after(REPLY_TIMEOUT) as scope:
        await connection.send(message)
    if scope.cancelled_caught:
        logger.warning(
            "pid %d left a %s unread for %.0fs; closing its connection",
            connection.peer.pid,
            type(message).__name__.lower(),
            REPLY_TIMEOUT,
        )
        await connection.aclose()


def _check_framable(session: str, prompt: Prompt) -> None:
    """Refuse a prompt that no harness could be sent.

    Raises:
        PromptTooLarge: its frame would exceed the wire's limit.
        ValueError: its ``meta`` cannot be framed.
    """
    try:
        encode(prompt)
    except FrameTooLarge as exc:
        raise PromptTooLarge(session, prompt.id, exc.size, exc.limit) from None
    except ProtocolError as exc:
        raise ValueError(f"session {session!r}: prompt {prompt.id}: {exc.reason}") from None
