"""``Harness`` and ``Session``: what the daemon knows of one session and its harness process.

Each answers for its own state: a harness says whether it is alive, attached, retired or
waiting for a connection, and owns its link (one place attaches it, one detaches it, one tears
it down); a session changes state through ``become`` only.
"""

from __future__ import annotations

import contextlib

import attrs
import trio

from ..process import Child, ProcessRef
from ._activity import Activity, Stall
from ._link import Link
from ._state import SessionState
from ._turns import TurnLog


@attrs.define(eq=False)
class Harness:
    """One harness process of a session, from its spawn (or adoption) to its exit."""

    ref: ProcessRef
    epoch: int
    child: Child | None
    """Our ``Child`` if this daemon started it; ``None`` if adopted after a restart."""
    since: float
    """Its last sign of life other than a pong (spawn, adoption, disconnection), on the
    daemon's awake clock."""
    link: Link | None = None
    linked: trio.Event = attrs.field(factory=trio.Event)
    """Set while ``link`` is attached; replaced when the link drops."""
    hello: trio.Event = attrs.field(factory=trio.Event)
    exited: trio.Event = attrs.field(factory=trio.Event)
    code: int | None = None
    retiring: trio.Event | None = None
    """Set once retiring starts; the event is set when it is done."""
    judging: bool = False
    """Whether a task is making sure it is a phantom (the watchdog starts one at a time)."""
    activity: Activity | None = None
    """What its engine was doing at its last pong (``None``: it never said)."""
    starting: bool = False
    """Adopted after a restart before it ever said hello (its record says ``starting``): it is
    still starting, and has the start timeout, not ``patience``, to say it."""

    @property
    def alive(self) -> bool:
        """Its exit has not been seen."""
        return not self.exited.is_set()

    @property
    def retired(self) -> bool:
        """It is being stopped, or was: nothing else may use it."""
        return self.retiring is not None

    @property
    def usable(self) -> bool:
        """Alive and not being retired: the session's harness to talk to."""
        return self.alive and not self.retired

    @property
    def attached(self) -> bool:
        """It has a link that is not closed."""
        return self.link is not None and not self.link.closed

    @property
    def awaiting_connection(self) -> bool:
        """Live, ought to be connected, and is not (one just spawned has the start timeout
        instead, and one being retired is already dealt with)."""
        if not self.usable or self.link is not None:
            return False
        return self.hello.is_set() or self.child is None

    def last_sign(self) -> float:
        """Its last sign of life, a pong included (awake time)."""
        return self.since if self.link is None else max(self.since, self.link.last_sign())

    def attach(self, link: Link) -> bool:
        """Make ``link`` its connection; whether this is its first hello."""
        self.link = link
        self.linked.set()
        first = not self.hello.is_set()
        self.hello.set()
        return first

    def detach(self, link: Link, now: float) -> bool:
        """``link`` dropped (at awake time ``now``); whether it was the current one."""
        if self.link is not link:
            return False
        self.link = None
        self.linked = trio.Event()
        self.since = now
        return True

    async def drop_link(self) -> None:
        """Close the current link and its connection, if there is one."""
        link = self.link
        if link is not None:
            link.close()
            with contextlib.suppress(trio.ClosedResourceError):
                await link.connection.aclose()

    def exit(self, code: int | None) -> None:
        """Its exit was seen, with ``code`` (``None``: not ours to reap)."""
        self.code = code
        self.exited.set()


@attrs.define(eq=False)
class Session:
    """One session: its lock (every decision about it is taken under it), its harness, its
    state and its restart history."""

    name: str
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    harness: Harness | None = None
    state: SessionState = SessionState.NEW
    reason: str | None = None
    restarts: int = 0
    history: list[float] = attrs.field(factory=list)
    """Wall-clock times of the restarts inside the restart window (kept in the record)."""
    streak: int = 0
    """Restarts in a row without a harness that stayed up (the backoff's exponent)."""
    next_attempt: float | None = None
    """Wall-clock time before which it is not restarted."""
    stall: Stall | None = None
    """The stall its harness is in, while it lasts."""
    stall_detail: str | None = None
    """The last stall's description, kept in the record while the stall lasts (so a restarted
    daemon shows it before the harness's first pong)."""
    waits: str = ""
    """While it is stalled: where its engine waits, as its harness's snapshot summarises it
    (``tether inspect``; empty: not known)."""
    known: bool = False
    """Whether a harness was ever recorded for it (the next spawn is then a restart)."""
    last_event: str = ""
    turns: TurnLog = attrs.field(factory=TurnLog)
    """How its turns ended, as its harnesses reported (wire revision 6)."""

    def become(self, state: SessionState) -> None:
        """The one place a session's state changes."""
        self.state = state

    def forget_failures(self) -> SessionState:
        """Clear its restart history and failure (``reset``); the state it is to be in."""
        self.history.clear()
        self.streak = 0
        self.next_attempt = None
        self.reason = None
        return SessionState.STOPPED if self.state is SessionState.FAILED else self.state

    def live_harness(self) -> Harness | None:
        """Its harness if that has not exited."""
        harness = self.harness
        return harness if harness is not None and harness.alive else None
