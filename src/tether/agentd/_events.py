"""``AgentEvent`` and ``EventLog``: every state change of every session, as a JSON line and on a
channel per subscriber.

Kinds are the ``EventKind`` enum (its values are what the log and subscribers see).
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import os
import socket
import time
from typing import IO, Any

import attrs
import trio

from .._private import open_private
from .._util import Throttle
from ..channels import Receiver, Sender, SendError, channel

logger = logging.getLogger("tether.agentd")


class EventKind(enum.StrEnum):
    """What happened to a session (``AgentEvent.kind``)."""

    SPAWNED = "spawned"
    """A harness was started for a session that never had one."""
    RESPAWNED = "respawned"
    """A fresh harness was started after the last one died, was a phantom or was superseded."""
    ATTACHED = "attached"
    """A harness said hello and was welcomed (``reconnected`` in the detail when it came back)."""
    REATTACHED = "reattached"
    """``start_agent`` found its harness healthy (a ``Nudge`` was sent)."""
    ADOPTED = "adopted"
    """A harness found by identity (after a restart, or saying hello with the current epoch)."""
    DETACHED = "detached"
    """Its harness's connection dropped."""
    PHANTOM = "phantom"
    """Its harness stopped answering: its tree is stopped."""
    SUPERSEDED = "superseded"
    """A harness of an older epoch was told to exit."""
    EXITED = "exited"
    """Its harness exited (with the code when it was ours to reap)."""
    SPAWN_FAILED = "spawn_failed"
    """A harness could not be started, or never said hello."""
    STOPPED = "stopped"
    """Stopped on request."""
    DELIVERY_ATTEMPT = "delivery_attempt"
    """One attempt at delivering a prompt failed."""
    DELIVERED = "delivered"
    """A prompt was recorded by the harness's engine (ADR 0034: delivered means recorded)."""
    DELIVERY_FAILED = "delivery_failed"
    """Every attempt at delivering a prompt failed."""
    FAILED = "failed"
    """The session hit its restart limit."""
    RESET = "reset"
    """Its failure and restart count were cleared."""
    UNCONFIRMED = "unconfirmed"
    """The host lease was lost: this daemon cannot confirm it owns the session."""
    CONFIRMED = "confirmed"
    """The host lease is held again and the session is still this host's."""
    TAKEOVER = "takeover"
    """This daemon takes over a session whose owner's lease ended."""
    STALLED = "stalled"
    """Its engine's turn or tool has not advanced past its threshold (once per episode)."""
    RECOVERED = "recovered"
    """A stalled turn or tool advanced again."""
    TURN_FAILED = "turn_failed"
    """A turn ended failed: its model request failed, the engine said so, or a death cut it
    and no harness resumed it (``failure``, ``status``, ``reason``: how; ADR 0051)."""


@attrs.frozen
class AgentEvent:
    """One state change of one session."""

    session: str
    """The session the event is about."""
    kind: str
    """What happened (an ``EventKind`` value): ``spawned``, ``delivered``, ``exited``, ..."""
    epoch: int | None = None
    """The harness's epoch, when one is concerned."""
    pid: int | None = None
    """The harness's pid, when one is concerned."""
    detail: str = ""
    """A sentence for people: the reason, the signal, the error."""
    at: float = attrs.field(factory=time.time)
    """Wall-clock time (seconds since the epoch), for people and other hosts."""
    host: str = ""
    """The daemon's host id (its hostname on a single-host store)."""
    prompt_id: str | None = None
    """The prompt a delivery event is about."""
    attempt: int | None = None
    """Which delivery attempt of that prompt this is (1 for the first)."""
    code: int | None = None
    """A harness's exit code, when this is its exit and it was ours to reap."""
    reason: str | None = None
    """Why, as a field of its own (also in ``detail``)."""
    failure: str | None = None
    """A failed turn's kind of failure (``http``, ``unreachable``, ``cut``...)."""
    status: int | None = None
    """A failed turn's status (an HTTP status), when it has one."""

    @property
    def time(self) -> str:
        """``at`` as ISO 8601 in UTC, to the millisecond."""
        stamp = datetime.datetime.fromtimestamp(self.at, datetime.UTC)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        """Every field (``null`` where it has no value), and ``time``."""
        return {"time": self.time, **attrs.asdict(self)}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> AgentEvent:
        """An event from a line of the event log (``time`` and names it does not know, from
        a later version, are left out)."""
        known = {field.name for field in attrs.fields(cls)}
        return cls(**{key: value for key, value in record.items() if key in known})

    def fields(self) -> dict[str, Any]:
        """The event as ``extra=`` fields of a log record (names that ``logging`` leaves),
        those with a value."""
        return {f"event_{k}": v for k, v in self.to_json().items() if v is not None}

    def describe(self) -> str:
        parts = [f"session={self.session}", self.kind]
        if self.epoch is not None:
            parts.append(f"epoch={self.epoch}")
        if self.pid is not None:
            parts.append(f"pid={self.pid}")
        if self.detail:
            parts.append(self.detail)
        return " ".join(parts)


class EventLog:
    """Appends each event to a JSON-lines file (if given), logs it on ``tether.agentd`` and
    hands it to every subscriber.

    A subscriber that falls ``capacity`` events behind is cut off (its channel closes after
    what it has buffered, and that is logged), so a slow reader never stalls the daemon.
    Lines are flushed, not fsynced: the log is a record for people, the store is the truth;
    a line that cannot be written (a full disk) is lost, and that is logged once a minute.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, host: str = "") -> None:
        self.path = path
        self.host = host or socket.gethostname()
        """Stamped on every event."""
        self._file: IO[str] | None = None
        self._subscribers: list[Sender[AgentEvent]] = []
        self._throttle = Throttle(logger)
        if path is not None:
            self.open(path)

    def open(self, path: str | os.PathLike[str]) -> None:
        """Append to ``path`` from now on (closing the file appended to before, if any)."""
        if self._file is not None:
            self._file.close()
        self.path = path
        # 0600: the events name sessions and carry the reasons users' prompts failed
        self._file = open(open_private(path), "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def emit(self, event: AgentEvent) -> None:
        if not event.host:
            event = attrs.evolve(event, host=self.host)
        logger.info("%s", event.describe(), extra=event.fields())
        if self._file is not None:
            line = json.dumps(event.to_json(), separators=(",", ":")) + "\n"
            try:
                self._file.write(line)
            except OSError as exc:  # a full disk loses log lines, never the daemon
                self._throttle.warn("write", "event log %s: cannot write: %s", self.path, exc)
        for subscriber in list(self._subscribers):
            try:
                subscriber.try_send(event)
            except trio.WouldBlock:
                logger.warning("an event subscriber fell behind and was cut off")
                self._drop(subscriber)
            except SendError:
                self._drop(subscriber)

    def _drop(self, subscriber: Sender[AgentEvent]) -> None:
        subscriber.close()
        self._subscribers.remove(subscriber)

    def subscribe(self, capacity: int = 1024) -> Receiver[AgentEvent]:
        """A receiver of every event from now on; close it to unsubscribe."""
        tx, rx = channel(AgentEvent, capacity, name="agentd events")
        self._subscribers.append(tx)
        return rx

    def reopen(self) -> None:
        """Open the file again by its path (after a log rotation moved it: SIGHUP)."""
        if self.path is not None:
            self.open(self.path)

    def close(self) -> None:
        """Close the file and end every subscription."""
        for subscriber in self._subscribers:
            subscriber.close()
        self._subscribers.clear()
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as exc:
                logger.warning("event log %s: last lines lost: %s", self.path, exc)
