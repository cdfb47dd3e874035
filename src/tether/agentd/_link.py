"""``Link``: the daemon's side of one attached harness connection, and its heartbeat.

Health comes only from the harness's connection loop answering pings on this connection
(systemd's watchdog rule): ``last_pong`` moves when, and only when, a ``Pong`` arrives. A link
that fails once is closed for good, and closing it ends the task that reads its connection
(``reading`` is that task's cancel scope), so no caller ever waits on a link nobody reads.
"""

from __future__ import annotations

from typing import Any

import trio

from ..channels import ChannelClosed
from ..process import ProcessRef
from ..wire import Connection, Inspect, Message, Ping, ProtocolError
from ..wire._codec import ping_frame
from ._awake import AwakeClock

RECORD_REVISION = 4
"""The first harness revision that reports ``Recorded`` (ADR 0034)."""
INSPECT_REVISION = 5
"""The first harness revision that answers ``Inspect`` (ADR 0040)."""
MAX_RECORDED = 10_000
"""Reported ids a link keeps; beyond it the oldest are dropped (a waiter that comes later
sends its prompt again and is answered anew)."""


class Link:
    """One attached harness: send with ``send`` (one sender at a time), probe with
    ``roundtrip``; ``pong(seq)`` is fed by the task that reads the connection."""

    def __init__(
        self,
        connection: Connection,
        ref: ProcessRef,
        epoch: int,
        clock: AwakeClock,
        revision: int = 1,
    ) -> None:
        self.connection = connection
        self.ref = ref
        self.epoch = epoch
        self.clock = clock
        self.revision = revision
        """The harness's wire revision (its ``Hello``'s)."""
        self.records = revision >= RECORD_REVISION
        """The harness reports each prompt recorded (``Recorded``); an older one is only
        known to have read it."""
        self._recorded: dict[str, None] = {}
        """Ids reported recorded on this link (oldest first, bounded): two deliveries of one id
        (a client's retry beside its first try) both see the one report."""
        self.last_pong = clock.now()
        """When the harness last answered, on the daemon's awake clock."""
        self.closed = False
        self.beats = False
        """It sends a pong every heartbeat unasked, so it needs no heartbeat ping."""
        self.reading = trio.CancelScope()
        """The scope of the task reading the connection: ``close`` cancels it."""
        self.detached = trio.Event()
        """Set once that task has let go of the link."""
        self._send_lock = trio.Lock()
        self._seq = 0
        self._acked = 0
        self._inspections: dict[int, dict[str, Any]] = {}
        """Answers to ``Inspect`` not yet taken, by seq."""
        self._inspect_seq = 0
        self._asked: float | None = None
        """When the outstanding ``Inspect`` was sent (awake clock; ``None``: none is)."""
        self._changed: trio.Event | None = None
        """Set when a pong arrives or the link closes, for whoever waits (made on demand)."""

    def __repr__(self) -> str:
        return f"<Link pid={self.ref.pid} epoch={self.epoch} acked={self._acked}>"

    def silence(self) -> float:
        """Awake seconds since the last pong."""
        return self.clock.now() - self.last_pong

    async def send(self, message: Message) -> bool:
        """Send ``message``; whether it was written (``False`` once the link is closed: the
        peer went away, or the message could not be framed). Always a checkpoint."""
        if self.closed:
            await trio.lowlevel.checkpoint()
            return False
        async with self._send_lock:
            try:
                await self.connection.send(message)
            except (ChannelClosed, ProtocolError, trio.ClosedResourceError, trio.BusyResourceError):
                self.close()
                return False
        return True

    async def ping(self) -> int:
        """Send the next ``Ping``; its seq (0 if the link is closed)."""
        seq = self.ping_nowait()
        if seq is not None:
            await trio.lowlevel.checkpoint()
            return seq
        self._seq += 1
        seq = self._seq
        return seq if await self.send(Ping(seq)) else 0

    def ping_nowait(self) -> int | None:
        """Send the next ``Ping`` without waiting, if it can go at once: its seq (0 if the
        link is closed), or ``None`` if it must wait (another send is under way, or the
        harness's socket buffer is full); ``ping`` then sends it. The watchdog pings a
        thousand harnesses this way in one pass, with no task switch per harness."""
        if self.closed:
            return 0
        if self._send_lock.locked():
            return None
        try:
            if not self.connection.send_nowait(ping_frame(self._seq + 1)):
                return None
        except ChannelClosed:
            self.close()
            return 0
        self._seq += 1
        return self._seq

    def pong(self, seq: int) -> None:
        """Record the harness's answer to ``Ping(seq)``, or (``seq`` 0) its beat: from its
        first beat on, the watchdog stops pinging it."""
        if seq > self._acked:
            self._acked = seq
        elif seq == 0:
            self.beats = True
        self.last_pong = self.clock.now()
        self._wake()

    def recorded(self, prompt_id: str) -> None:
        """The harness reports ``prompt_id`` recorded in its transcript."""
        self._recorded[prompt_id] = None
        if len(self._recorded) > MAX_RECORDED:
            del self._recorded[next(iter(self._recorded))]
        self._wake()

    async def wait_recorded(self, prompt_id: str) -> bool:
        """Wait until the harness reports ``prompt_id`` recorded; ``False`` if the link closes
        first. No deadline of its own: a healthy engine may take long to ask for a prompt,
        and an unhealthy one is replaced, which closes the link."""
        while prompt_id not in self._recorded and not self.closed:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()
        return prompt_id in self._recorded

    def last_sign(self) -> float:
        """Its last pong, or the instant it was asked for a snapshot it is still reading:
        asking never counts against a harness (its loop reads it at once, and answers no ping
        meanwhile), for at most the time the asker waits."""
        return self.last_pong if self._asked is None else max(self.last_pong, self._asked)

    def inspected(self, seq: int, snapshot: dict[str, Any]) -> None:
        """The harness answers ``Inspect(seq)`` (from its loop: a sign of life); an answer
        nobody asked for is dropped."""
        if 0 < seq <= self._inspect_seq and seq not in self._inspections:
            self._inspections[seq] = snapshot
            self.last_pong = self.clock.now()
            self._wake()

    async def inspect(self) -> dict[str, Any] | None:
        """Ask the harness for a snapshot and wait for it; ``None`` if the link closes first.
        The caller bounds the wait: a harness whose loop is stuck never answers."""
        self._inspect_seq += 1
        seq = self._inspect_seq
        self._asked = self.clock.now()
        try:
            if not await self.send(Inspect(seq)):
                return None
            while seq not in self._inspections and not self.closed:
                if self._changed is None:
                    self._changed = trio.Event()
                await self._changed.wait()
            return self._inspections.get(seq)
        finally:
            self._inspections.pop(seq, None)
            if seq == self._inspect_seq:
                self._asked = None

    async def roundtrip(self) -> bool:
        """Ping now and wait for the answer; ``False`` if the link closes first. Every message
        sent before is then known to have been read by the harness's loop, in order. Always a
        checkpoint, so a caller looping on it cannot spin."""
        seq = await self.ping()
        while seq and self._acked < seq and not self.closed:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()
        return bool(seq) and self._acked >= seq

    def close(self) -> None:
        """Mark the link closed, end the task reading it and wake every waiter."""
        self.closed = True
        self.reading.cancel()
        self._wake()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None
