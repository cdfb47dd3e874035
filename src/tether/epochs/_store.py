"""The ``EpochStore`` protocol, ``Superseded`` and ``SessionRecord``: what every store offers.

An epoch fences a session: each spawn of its harness gets a number strictly greater than every
number issued before for that session, and any holder of an older number is refused, on
``check`` and on every write (``save``), so a phantom from an older epoch can neither attach
nor overwrite what its successor wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs
import trio

from ..channels import Sender


class Superseded(Exception):
    """``epoch`` of ``session`` is not the current one; ``current`` is (``None``: none issued)."""

    def __init__(self, session: str, epoch: int, current: int | None) -> None:
        now = "no epoch was ever issued" if current is None else f"the current epoch is {current}"
        super().__init__(f"session {session!r}: epoch {epoch} is superseded; {now}")
        self.session = session
        """The session whose epoch moved on."""
        self.epoch = epoch
        """The epoch the caller held."""
        self.current = current
        """The epoch that is current now."""

    def __reduce__(self) -> tuple[type[Superseded], tuple[str, int, int | None]]:
        return type(self), (self.session, self.epoch, self.current)


class StoreUnavailable(Exception):
    """The store could not be reached or could not answer within its bound; nothing is known
    about the operation's effect beyond what the store guarantees for retries."""

    def __init__(self, endpoints: str, error: str) -> None:
        super().__init__(f"epoch store at {endpoints} unavailable: {error}")
        self.endpoints = endpoints
        """The store's address (etcd endpoints, or the SQLite path)."""
        self.error = error
        """What the last attempt raised."""

    def __reduce__(self) -> tuple[type[StoreUnavailable], tuple[str, str]]:
        return type(self), (self.endpoints, self.error)


class HostIdInUse(StoreUnavailable):
    """Another daemon took this host's id on the store after this one did: this one stands
    down (it is unavailable to the store from now on, so every caller refuses work)."""

    def __init__(self, endpoints: str, host: str) -> None:
        super().__init__(
            endpoints,
            f"host id {host!r} was taken by another daemon; give each daemon its own host id",
        )
        Exception.__init__(self, f"epoch store at {endpoints}: {self.error}")
        self.host = host
        """The host id another live daemon holds."""

    def __reduce__(self) -> tuple[type[HostIdInUse], tuple[str, str]]:
        return type(self), (self.endpoints, self.host)


class StoreInUse(Exception):
    """Another daemon serves this store (it holds the store's daemon lock for its whole life);
    ``pid`` names it (``None`` if it could not be read)."""

    def __init__(self, path: str, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "a process whose pid is unknown"
        super().__init__(f"epoch store {path} is served by another daemon ({holder})")
        self.path = path
        """The store's file."""
        self.pid = pid
        """The pid of the live daemon that has it open (``None``: it could not be read)."""

    def __reduce__(self) -> tuple[type[StoreInUse], tuple[str, int | None]]:
        return type(self), (self.path, self.pid)


class OwnedElsewhere(Exception):
    """``session`` belongs to another live host (its lease holds); only that host may bump
    it until the lease expires."""

    def __init__(self, session: str, host: str) -> None:
        super().__init__(f"session {session!r} is owned by host {host!r}, whose lease is alive")
        self.session = session
        """The session that another host owns."""
        self.host = host
        """The host that owns it."""

    def __reduce__(self) -> tuple[type[OwnedElsewhere], tuple[str, str]]:
        return type(self), (self.session, self.host)


def fence_write(session: str, epoch: int, current: int | None) -> None:
    """The fencing rule on the write path: the holder of ``epoch`` may write unless a newer
    epoch was issued. Every store applies it inside the transaction that writes.

    Raises:
        Superseded: ``epoch`` is older than ``current``.
    """
    if current is not None and epoch < current:
        raise Superseded(session, epoch, current)


class FencedStore:
    """``check`` for a store that has ``current``: the fencing rule on the check path, once
    for every store."""

    async def current(self, session: str) -> int | None:
        raise NotImplementedError

    async def check(self, session: str, epoch: int) -> None:
        """Return if ``epoch`` is the current epoch of ``session``.

        Raises:
            Superseded: a newer epoch was issued, or none ever was.
        """
        current = await self.current(session)
        if current != epoch:
            raise Superseded(session, epoch, current)


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    return tuple(float(value) for value in values)


@attrs.frozen
class SessionRecord:
    """What the daemon keeps about a session's harness between its own restarts."""

    pid: int | None = None
    """The harness's pid, or ``None`` when none runs."""
    create_time: float | None = None
    """The harness's creation time (psutil's), which with the pid is its identity."""
    boot_id: str | None = None
    """The kernel boot id when it was recorded: after a reboot the pid means nothing."""
    state: str = "new"
    """``new``, ``running``, ``stopped``, ``failed``... as the daemon defines them."""
    restarts: int = 0
    """Restarts counted by the daemon's restart limit."""
    reason: str | None = None
    """Why the session is in this state (for ``failed`` above all)."""
    epoch: int | None = None
    """The epoch whose holder wrote this record (set by the store on ``save``)."""
    host: str | None = None
    """The host id of the daemon that wrote it (``None`` for a single-host store's daemon)."""
    history: tuple[float, ...] = attrs.field(default=(), converter=_floats)
    """Wall-clock times of the restarts inside the restart window: a daemon restart keeps
    counting a crash loop."""
    streak: int = 0
    """Restarts in a row without a harness that stayed up: the backoff's exponent."""
    next_attempt: float | None = None
    """Wall-clock time before which the session is not restarted (its backoff)."""
    stalled: str | None = None
    """What is stalled, while a stall lasts (``stalled: tool bash silent for ...``)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("history", "streak", "next_attempt", "stalled")
    """Fields added after the first layout: stores keep them together (one JSON column)."""

    def extra(self) -> dict[str, Any]:
        """The fields of ``EXTRA``, for one JSON value."""
        return {name: getattr(self, name) for name in self.EXTRA}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SessionRecord:
        """A record from stored values, ignoring names this version does not know (written
        by a later one)."""
        known = {field.name for field in attrs.fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in known})


@attrs.frozen
class QueuedPrompt:
    """A prompt the daemon accepted for a session and has not yet settled."""

    session: str
    """The session it waits for."""
    id: str
    """The prompt's id, kept across every delivery attempt."""
    text: str
    """The prompt as sent."""
    meta: dict[str, Any] = attrs.field(factory=dict)
    """The sender's metadata, passed to the engine unchanged."""
    attempts: int = 0
    """Delivery attempts made so far (each a send on a live connection, or a failed start)."""


@runtime_checkable
class EpochStore(Protocol):
    """Where epochs are issued and session records kept; implementations must be atomic."""

    async def bump(self, session: str) -> int:
        """Issue a new epoch for ``session``: strictly greater than any issued before."""
        ...

    async def current(self, session: str) -> int | None:
        """The latest epoch issued for ``session``, or ``None``."""
        ...

    async def check(self, session: str, epoch: int) -> None:
        """Return if ``epoch`` is current; raise ``Superseded`` otherwise."""
        ...

    async def record(self, session: str) -> SessionRecord | None:
        """The session's record, or ``None`` if none was saved."""
        ...

    async def save(self, session: str, record: SessionRecord, *, epoch: int) -> None:
        """Store ``record`` unless ``epoch`` is older than the current one (``Superseded``)."""
        ...

    async def sessions(self) -> list[str]:
        """Every session with a saved record, sorted."""
        ...

    async def enqueue(self, prompt: QueuedPrompt) -> None:
        """Keep ``prompt`` durably until ``settle``; enqueuing the same id again is a no-op."""
        ...

    async def attempted(self, session: str, prompt_id: str) -> None:
        """Count one more delivery attempt of a queued prompt."""
        ...

    async def settle(self, session: str, prompt_id: str, outcome: str) -> None:
        """Take a prompt off the queue, ``delivered`` or ``failed: <reason>``, keeping the
        outcome so that enqueuing its id again is a no-op (the etcd store keeps it for
        ``keep_settled``)."""
        ...

    async def pending(self) -> list[QueuedPrompt]:
        """Every queued prompt not yet settled, oldest first."""
        ...

    async def identity(self) -> str:
        """The store's id: generated the first time it is asked for and kept in the store, so
        every daemon of this store, and only of this store, marks its harnesses with it."""
        ...

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """Held by the daemon serving this store for its whole life. A single-host store lets
        one daemon in (a second raises ``StoreInUse`` naming the holder's pid); a shared store
        leaves this to each host's lease and holds nothing."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class LeasedEpochStore(EpochStore, Protocol):
    """An ``EpochStore`` shared by several hosts: each bump makes the bumping host the
    session's owner for as long as its lease lives, and no other host may bump it meanwhile
    (``OwnedElsewhere``). ``Agentd`` runs ``keep_alive`` and refuses work once
    ``lease_held`` is false."""

    host_id: str
    """This daemon's host id on the shared store."""
    lease_ttl: int
    """Seconds a host's lease outlives its last keepalive."""

    def lease_held(self) -> bool:
        """Whether this host's lease is known alive now."""
        ...

    def lease_remaining(self) -> float:
        """Seconds this host's lease is known alive for from now (0 once it is not)."""
        ...

    async def keep_alive(self, *, task_status: trio.TaskStatus[None] = ...) -> None:
        """Hold the lease until cancelled (started once it is granted)."""
        ...

    async def claim(self, session: str, epoch: int) -> bool:
        """Hang ``session`` on this host's lease if ``epoch`` is still its current epoch and
        no other host owns it (after a daemon restart); whether it now belongs here."""
        ...

    async def owner(self, session: str) -> str | None:
        """The host whose live lease owns ``session``, or ``None``."""
        ...

    async def orphaned(self) -> list[str]:
        """Sessions with a record and no live owner."""
        ...

    async def watch_released(
        self, sessions: Sender[str], *, task_status: trio.TaskStatus[None] = ...
    ) -> None:
        """Send each session whose owner's lease ends to ``sessions`` until cancelled
        (started once watching)."""
        ...

    async def revoke(self) -> None:
        """End this host's lease now: every session it owns is free at once."""
        ...
