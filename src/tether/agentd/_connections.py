"""``Connections``: the daemon's side of its socket. A connection's first frame decides what it
is: a ``Control`` from ``tether`` (answered by the control handler) or a harness's ``Hello``,
admitted or refused (``admit``), then attached and read until it drops.

Whatever one connection meets ends that connection only: a bad frame is refused (``serve``
answers a ``ProtocolError``), anything else is logged as a bug and the connection closed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from .._util import Throttle
from ..channels import ChannelClosed
from ..epochs import EpochStore, StoreUnavailable
from ..process import ProcessRef
from ..wire import (
    Bye,
    Connection,
    Control,
    Error,
    Hello,
    Inspection,
    Message,
    Pong,
    ProtocolError,
    Recorded,
    Superseded,
    TurnEnded,
    Welcome,
)
from ._activity import Activity
from ._admission import Admitted, admit
from ._awake import AwakeClock
from ._events import EventKind
from ._guard import Tasks
from ._lifecycle import Harnesses
from ._link import Link
from ._model import Harness, Session
from ._registry import Sessions, valid_name
from ._settings import Settings
from ._state import SessionState

logger = logging.getLogger("tether.agentd")

REVISION = 6
"""The wire revision this daemon speaks: it reads activity on pongs (2, ADR 0025), wants a
pong every heartbeat unasked from a harness that can (3, ADR 0028), counts a prompt
delivered once a harness that can reports it recorded (4, ADR 0034), asks a harness that
can for an ``Inspection`` (5, ADR 0040), and reads each turn's end (6, ADR 0051)."""
REPLY_TIMEOUT = 5.0
"""Seconds a peer has to read what the daemon sends it (a reply, a refusal) before its
connection is closed."""

ControlHandler = Callable[[Connection, Control], Awaitable[None]]


@attrs.define(eq=False)
class Connections:
    """Serves each connection of the daemon's socket."""

    settings: Settings
    store: EpochStore
    sessions: Sessions
    harnesses: Harnesses
    clock: AwakeClock
    tasks: Tasks
    control: ControlHandler
    _strangers: Throttle = attrs.field(factory=lambda: Throttle(logger), init=False)

    async def handle(self, connection: Connection) -> None:
        """One connection, from its first frame to its close."""
        try:
            await self._converse(connection)
        except (ProtocolError, ChannelClosed):
            raise
        except Exception:  # one connection's bug must not end the daemon
            logger.exception("connection of pid %d failed; closing it", connection.peer.pid)
            await connection.refuse(ProtocolError("agentd failed on this request; see its log"))

    async def _converse(self, connection: Connection) -> None:
        timeout = self.settings.start_timeout
        with trio.move_on_after(timeout) as first:
            message = await connection.receive()
        if first.cancelled_caught:
            raise ProtocolError(f"no first message within {timeout:.1f}s")
        if isinstance(message, Control):
            await self.control(connection, message)
        elif isinstance(message, Hello):
            try:
                await self._hello(connection, message)
            except StoreUnavailable as exc:  # the harness retries; its loop has a bound
                raise ProtocolError(f"cannot check the epoch now: {exc}") from None
        else:
            raise ProtocolError(
                f"the first message must be hello or control, not {type(message).__name__}"
            )

    async def _hello(self, connection: Connection, hello: Hello) -> None:
        if hello.pid != connection.peer.pid:
            raise ProtocolError(
                f"hello names pid {hello.pid} but the peer is pid {connection.peer.pid}"
            )
        if not valid_name(hello.session):
            raise ProtocolError(f"hello names an unsafe session name {hello.session!r}")
        try:
            peer = ProcessRef.of(hello.pid)
        except ProcessLookupError:
            return
        known = self.sessions.find(hello.session)
        current = await self.store.current(hello.session)
        harness = known.harness if known is not None else None
        decision = admit(hello.epoch, current, peer, peer.is_alive(), harness)
        if not isinstance(decision, Admitted):
            await send_within(connection, Superseded(hello.session, hello.epoch, current or 0))
            if known is None:  # a session nobody started: nothing is made for it
                self._strangers.warn(
                    "hello", "refused a hello for unknown session %r from pid %d: %s",
                    hello.session, peer.pid, decision.reason,
                )  # fmt: skip
                return
            stale = Harness(peer, hello.epoch, None, since=self.clock.now())
            self.sessions.emit(known, EventKind.SUPERSEDED, stale, decision.reason)
            if decision.stop:
                name = f"superseded {peer.pid}"
                self.tasks.start(self.harnesses.confirm_exit, known, stale, name=name)
            return
        session = self.sessions.get(hello.session)  # admitted: the session exists from now on
        if decision.adopt:
            adopted = Harness(peer, hello.epoch, None, self.clock.now())
            self.harnesses.adopt(session, adopted)
            self.sessions.emit(
                session, EventKind.ADOPTED, adopted, "it said hello with the current epoch"
            )
            # Written down, so the next daemon adopts it at its start: with no pid in its
            # record (a daemon killed between a spawn and its save) a send that came before
            # its next hello spawned a new epoch over it.
            await self.harnesses.records.save(session, adopted, SessionState.ATTACHED)
        harness = session.harness
        assert harness is not None
        await harness.drop_link()  # it reconnected before we saw the old connection drop
        connection.leave_budget()  # strangers' half-written frames never hold up its reads
        link = Link(connection, peer, hello.epoch, self.clock, hello.revision)
        welcome = Welcome(session.name, hello.epoch, self.settings.heartbeat, REVISION)
        if await link.send(welcome):
            await self._attached(session, harness, link)

    async def _attached(self, session: Session, harness: Harness, link: Link) -> None:
        first = harness.attach(link)
        session.become(SessionState.STALLED if session.stall_detail else SessionState.ATTACHED)
        self.sessions.emit(session, EventKind.ATTACHED, harness, "" if first else "reconnected")
        try:
            with link.reading:
                await _read(link, harness, lambda outcome: self._turn_ended(session, outcome))
        finally:
            link.close()
            link.detached.set()
            if harness.detach(link, self.clock.now()) and harness.usable:
                session.become(SessionState.DISCONNECTED)
                self.sessions.emit(session, EventKind.DETACHED, harness)

    def _turn_ended(self, session: Session, outcome: TurnEnded) -> None:
        """A harness reports a turn's end: kept for ps and waiters; a failure this daemon
        had not heard of is an event (one reported ``again`` only updates ps: it is old)."""
        if session.turns.ended(outcome) and outcome.failed and not outcome.again:
            status = f" {outcome.status}" if outcome.status else ""
            self.sessions.emit(
                session, EventKind.TURN_FAILED, session.harness,
                f"prompt {outcome.prompt_id}: {outcome.failure}{status}: {outcome.detail}",
                prompt_id=outcome.prompt_id, reason=outcome.detail, failure=outcome.failure,
                status=outcome.status or None,
            )  # fmt: skip


async def _read(link: Link, harness: Harness, turn_ended: Callable[[TurnEnded], None]) -> None:
    async for message in link.connection:
        if isinstance(message, Pong):
            link.pong(message.seq)
            if message.kind:
                harness.activity = Activity.from_pong(message, link.last_pong)
        elif isinstance(message, Recorded):
            link.recorded(message.prompt_id)
        elif isinstance(message, TurnEnded):
            turn_ended(message)
        elif isinstance(message, Inspection):
            link.inspected(message.seq, message.snapshot)
        elif isinstance(message, Bye):
            return
        elif isinstance(message, Error):
            logger.warning("harness pid %d refused a frame: %s", link.ref.pid, message.reason)
            return
        else:
            raise ProtocolError(f"unexpected {type(message).__name__} from a harness")


async def send_within(connection: Connection, message: Message) -> None:
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
