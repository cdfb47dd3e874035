"""``Agentd``: the daemon that starts one harness per session, reattaches to it while it is
healthy, replaces it when it is a phantom or dead, and never retries without end.

This class is the facade: it validates its settings once and wires small parts together
(ADR 0022), each with one job: ``Starter`` takes the decision for a session under its lock,
``Judge`` says whether a harness still answers, ``Watchdog`` pings and replaces phantoms,
``Harnesses`` spawns, watches, retires and sweeps, ``Outbox`` delivers prompts, ``Connections``
serves the socket (``admit`` decides on a harness's hello), ``ControlHandler`` answers
``tether``, ``Records`` writes the store, and on a shared store ``LeaseWatch`` and ``Takeover``
deal with host leases. ``docs/agentd.md`` says what each outcome is and how long it may take.

Harnesses are not owned by a ``ChildGroup``: the daemon's own restart must leave them running.
Their identity ``(pid, create_time, boot_id, epoch)`` is saved in the store, and a restarted
daemon adopts the live ones by identity and waits ``miss_limit`` heartbeats for them to
reconnect before judging them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import trio

from .._private import make_owned
from ..channels import Receiver
from ..epochs import EpochStore, OwnedElsewhere, StoreUnavailable
from ..process import become_subreaper, reap_orphans
from ..wire import Prompt, TurnEnded, serve
from ._activity import StallPolicy
from ._adoption import adopt_all
from ._awake import AwakeClock
from ._backoff import Backoff
from ._connections import Connections
from ._control import ControlHandler
from ._counts import Counts
from ._delivery import Outbox
from ._events import AgentEvent, EventKind, EventLog
from ._guard import Tasks
from ._hosts import LeaseWatch, Takeover
from ._inspection import inspect
from ._judge import Judge
from ._lease import SharedHost, lease_of
from ._lifecycle import Harnesses
from ._outcomes import Attached, Delivered, Queued, SessionStatus
from ._records import Records
from ._registry import Sessions
from ._settings import EVENT_LOG, Settings, SettingsView
from ._stalls import Stalls
from ._starter import Starter
from ._state import SessionState
from ._turns import wait_turn
from ._watchdog import Watchdog

logger = logging.getLogger("tether.agentd")


class Agentd(SettingsView):
    """The session daemon (a facade over its parts; see the module).

    Args:
        store: where epochs, session records and queued prompts live.
        socket_path: the Unix socket harnesses and ``tether`` commands connect to (its
            directory must be mode 0700; see ``tether.wire.serve``).
        harness_argv: how to start a harness; it gets ``TETHER_SESSION``, ``TETHER_EPOCH``,
            ``TETHER_AGENTD`` (the socket), ``TETHER_STATE_DIR``
            (``<state_dir>/sessions/<session>``), ``TETHER_GRACE`` and ``TETHER_STORE_ID`` in
            its environment, which ``run_harness`` reads.
        heartbeat: seconds between pings to each attached harness.
        miss_limit: heartbeats without a pong (or without a connection) that make a phantom.
        restart_limit: ``(n, window)``: more than ``n`` restarts within ``window`` seconds
            fails the session until ``reset``.
        grace: each step of stopping a harness's tree (SIGINT, SIGTERM, SIGKILL).
        start_timeout: seconds a new harness has to say ``Hello``.
        delivery_attempts: how many times ``deliver`` tries, each through ``start_agent``.
        state_dir: the event log, and sessions' directories under ``sessions/`` (default: the
            socket's directory).
        env: the harnesses' base environment (default: this process's).
        reap_orphans: make this process a subreaper and reap every zombie child no ``Child``
            answers for (what ``tether agentd`` does; leave it off when embedding the daemon
            in a process whose other children are waited for elsewhere).
        adopt: on a ``LeasedEpochStore``, take over every session whose owner's lease ends
            (and those found without an owner at start and every ``lease_ttl``), instead of
            only when asked for one.
        spawn_limit: harnesses started at once (default: twice the CPUs); a start waiting
            its turn does not count against ``start_timeout``.
        stall_after: seconds a turn or a tool may go without progress when the harness has
            no measured threshold for it (the ledger's, per route and phase or per tool).
        on_stall: ``"announce"`` a stall (state ``stalled``, a ``stalled`` event) or
            ``"respawn"``: supersede the harness, its open calls sealed as stalled, and start a
            fresh epoch.
        restart_backoff: how long a crashing session waits between restarts (``Backoff``).

    Raises:
        ValueError: a setting makes no sense (named).
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
        stall_after: float = 300.0,
        on_stall: StallPolicy | str = StallPolicy.ANNOUNCE,
        restart_backoff: Backoff | None = None,
    ) -> None:
        socket = os.fspath(socket_path)
        settings = Settings(
            socket_path=socket,
            harness_argv=tuple(harness_argv),
            heartbeat=heartbeat,
            miss_limit=miss_limit,
            restart_limit=restart_limit,
            grace=grace,
            start_timeout=start_timeout,
            delivery_attempts=delivery_attempts,
            state_dir=os.fspath(state_dir if state_dir is not None else os.path.dirname(socket)),
            env=dict(os.environ if env is None else env),
            reap_orphans=reap_orphans,
            adopt=adopt,
            spawn_limit=spawn_limit if spawn_limit is not None else 2 * (os.cpu_count() or 1),
            stall_after=stall_after,
            on_stall=StallPolicy(on_stall),
            restart_backoff=restart_backoff if restart_backoff is not None else Backoff(),
        )
        self.settings = settings
        """The daemon's timings and limits, as given."""
        self.store = store
        """The epoch store that fences the sessions and keeps the outbox."""
        self._lease = lease_of(store)
        self.events = EventLog(host=self._lease.host or "")
        """The session events: appended to the event log and handed to each ``subscribe()``."""
        self._tasks = Tasks()
        self._clock = AwakeClock()
        self._sessions = Sessions(self.events)
        records = Records(store, self.host)
        self._harnesses = Harnesses(
            settings, self._sessions, records, self._tasks, self._clock, self.host
        )
        self._judge = Judge(settings, self._clock)
        self._starter = Starter(
            settings, store, self._lease, self._sessions, self._harnesses, self._judge,
            records, self._tasks,
        )  # fmt: skip
        self._records = records
        self._outbox = Outbox(settings, store, self._lease, self._sessions, self._starter)
        stalls = Stalls(
            settings, self._clock, store, self._sessions, records, self._harnesses,
            self._starter, self._tasks,
        )  # fmt: skip
        self._watchdog = Watchdog(
            settings, self._clock, self._sessions, self._judge, self._harnesses,
            self._starter, self._lease, self._tasks, stalls,
        )  # fmt: skip
        self._connections = Connections(
            settings, store, self._sessions, self._harnesses, self._clock, self._tasks,
            ControlHandler(self),
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"<tether.Agentd {self.socket_path!r} sessions={len(self._sessions)}>"

    @property
    def host(self) -> str | None:
        """The host id harnesses and records carry (``None`` on a single-host store)."""
        return self._lease.host

    @property
    def store_id(self) -> str | None:
        """The store's id (``EpochStore.identity``), read at start: every harness carries it
        as ``TETHER_STORE_ID``, and sweeps touch only processes that do."""
        return self._harnesses.store_id

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
        if self._tasks.nursery is not None:
            raise RuntimeError("this Agentd is already running")
        make_owned(self.state_dir, "state directory")  # before anything is opened in it
        async with self.store.exclusive():
            self._harnesses.store_id = await self.store.identity()
            default_log = os.path.join(self.state_dir, EVENT_LOG)
            self.events.open(log_path if log_path is not None else default_log)
            if self.reap_orphans:
                become_subreaper()
            try:
                async with trio.open_nursery() as nursery:
                    self._tasks.nursery = nursery
                    await self._start_parts(nursery)
                    try:
                        yield self
                    finally:
                        self._outbox.stop()  # first: it would start harnesses to deliver to
                        if stop_harnesses:
                            with trio.CancelScope(shield=True):
                                await self._stop_all()
                                await self._lease.release()
                        if self.reap_orphans:
                            reap_orphans()
                        nursery.cancel_scope.cancel()
            finally:
                self._tasks.nursery = None
                self.events.close()

    async def _start_parts(self, nursery: trio.Nursery) -> None:
        await self._lease.hold(nursery)
        await adopt_all(
            self.settings, self.store, self._lease, self._sessions, self._harnesses,
            self._tasks, self._clock,
        )  # fmt: skip
        await nursery.start(serve, self.socket_path, self._connections.handle)
        nursery.start_soon(self._watchdog.run, name="agentd watchdog")
        if isinstance(self._lease, SharedHost):
            watch = LeaseWatch(
                self.settings, self._lease, self.store, self._sessions, self._harnesses,
                self._tasks,
            )  # fmt: skip
            nursery.start_soon(watch.run, name="agentd lease")
            if self.adopt:
                takeover = Takeover(
                    self.settings, self._lease.store, self._lease, self._sessions,
                    self.start_agent, self._outbox.redeliver, self._tasks,
                )  # fmt: skip
                await nursery.start(takeover.run)
        for queued in await self.store.pending():
            self._tasks.start(self._outbox.redeliver, queued, name=f"redeliver {queued.id}")

    def subscribe(self, capacity: int = 1024) -> Receiver[AgentEvent]:
        """Every event from now on, on a channel of its own; close the receiver to stop."""
        return self.events.subscribe(capacity)

    def confirmed(self) -> bool:
        """Whether this daemon knows it still owns its sessions: always, on a single-host
        store; while its host lease is known alive, on a shared one."""
        return self._lease.confirmed()

    # -- the operations ---------------------------------------------------------------------

    async def start_agent(self, session_name: str) -> Attached:
        """Make sure the session has one healthy harness attached; say how.

        Bounded by ``3 * patience + 3 * heartbeat + 2 * grace + 1 + start_timeout`` seconds
        once a spawn's turn comes (``spawn_limit``): a silent harness is given its patience,
        a confirming window and, if it is runnable but starved, one more patience.

        Raises:
            SessionFailed: the session hit its restart limit (until ``reset``).
            StartFailed: a fresh harness never said ``Hello``; it was stopped.
            SpawnError: the harness program cannot be executed.
            Unconfirmed: the host lease on a shared store is not known alive.
            ValueError: the session name is not safe for a path.
            RuntimeError: the daemon is not running.
        """
        return await self._starter.start(self._sessions.get(session_name), nudge=True)

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered:
        """Queue ``prompt`` durably, then hand it to the session's harness, starting or
        replacing it through ``start_agent``, until a harness records it in the transcript as
        its engine takes it; at most ``delivery_attempts`` harnesses may end first.

        Delivered means recorded (``Delivered.recorded`` is ``False`` for a harness older
        than wire revision 4: its loop read it). A successor gets the same ``id`` and never
        gives an id its transcript holds to its engine again: at the engine, exactly once
        (ADR 0034). No deadline while the harness is healthy: a busy engine is waited for.

        Raises:
            PromptTooLarge: its frame would exceed ``tether.wire.MAX_FRAME``; it was not
                queued.
            ValueError: its ``meta`` cannot be framed (nested too deep, an integer beyond
                64 bits); it was not queued.
            DeliveryFailed: naming every attempt and why it failed.
        """
        return await self._outbox.deliver(session_name, prompt)

    async def turn(self, session_name: str, prompt_id: str) -> TurnEnded:
        """How the delivered prompt ``prompt_id``'s turn ended, once it has (ADR 0051).

        Raises:
            TurnUnknown: no such session, or its harness predates wire revision 6 (one that
                exits first, or a stop or failure, is a failed turn: ``exited``...).
        """
        return await wait_turn(self._sessions, session_name, prompt_id)

    async def deliver_later(self, session_name: str, prompt: str | Prompt) -> Queued:
        """Queue ``prompt`` durably and deliver it as ``deliver`` does, without waiting: its
        ``delivered`` or ``delivery_failed`` event says how it went.

        Raises:
            PromptTooLarge, ValueError: as for ``deliver``; it was not queued.
            DeliveryFailed: it could not be queued.
        """
        session, queued = await self._outbox.queue(session_name, prompt)
        name = f"deliver {queued.id}"
        self._tasks.start(self._outbox.deliver_later, session, queued, name=name)
        return Queued(session.name, queued.id)

    async def stop_agent(self, session_name: str) -> None:
        """Stop the session's harness tree (SIGINT first, so it seals its calls) and record
        the session as ``stopped``. Bounded by ``2 * grace + 2`` seconds.

        Raises:
            OwnedElsewhere: another host owns the session (its record is left as it is).
        """
        session = self._sessions.get(session_name)
        async with session.lock:
            harness = session.harness
            if harness is not None and harness.alive:
                await self._harnesses.retire(session, harness, "stopped by request")
            await self._records.save(
                session, harness, SessionState.STOPPED, keep_pid=False, quiet=False
            )
            session.become(SessionState.STOPPED)
            self._sessions.emit(session, EventKind.STOPPED, harness)

    async def reset(self, session_name: str) -> None:
        """Clear a failed session's failure and its restart count.

        Raises:
            OwnedElsewhere: another host owns the session (its record is left as it is).
        """
        session = self._sessions.get(session_name)
        async with session.lock:
            state = session.forget_failures()
            await self._records.save(session, None, state, keep_pid=False, quiet=False)
            session.become(state)
            self._sessions.emit(session, EventKind.RESET)

    async def inspect(self, session_name: str) -> dict[str, Any]:
        """A live snapshot of the session's harness (``tether inspect``): ``session``, ``pid``,
        ``epoch``, ``state`` and ``snapshot``, its tasks, their waits, its turn, open tool
        calls and last transcript entries (``tether.inspect.snapshot()`` in the harness).

        Raises:
            Uninspectable: no harness is attached, or it predates inspection (69).
            InspectTimedOut: its connection loop did not answer within 5 s (75).
        """
        return await inspect(self._sessions.get(session_name))

    def status(self) -> list[SessionStatus]:
        """One row per session, sorted by name; while the host lease is not known alive,
        every session this daemon runs is ``unconfirmed``, never healthy."""
        return self._sessions.status(self.confirmed(), self._clock.now(), self.stall_after)

    def attached(self) -> dict[str, int]:
        """Session name to the pid of its attached harness, for every attached session."""
        return self._sessions.attached()

    @property
    def counts(self) -> Counts:
        """Deliveries by outcome and their latencies since the daemon started (metrics)."""
        return self._outbox.counts

    def knows(self, session_name: str) -> bool:
        """Whether a session of that name exists: recorded in the store (read at start) or
        started since. ``tether send``, ``stop`` and ``reset`` refuse one that does not."""
        return session_name in self._sessions

    async def _stop_all(self) -> None:
        async def stop(name: str) -> None:
            try:
                await self.stop_agent(name)
            except (OwnedElsewhere, StoreUnavailable) as exc:  # stopped, not recorded
                logger.warning("session %s: %s", name, exc)

        async with trio.open_nursery() as nursery:
            for session in self._sessions:
                if session.live_harness() is not None:
                    nursery.start_soon(stop, session.name)
