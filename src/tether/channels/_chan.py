"""The state every endpoint of one mpsc channel shares (``_Chan``), its statistics, and the
reference counts every endpoint reports."""

from __future__ import annotations

import weakref
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
from outcome import Error, Value

from ._errors import ChannelClosed, ChannelEnded, ReceiverClosed, SendError
from ._handles import SharedState
from ._permit import SLOT, new_permit
from ._typecheck import ClassSpec

if TYPE_CHECKING:
    from ._mpsc import Sender, WeakSender

T = TypeVar("T")


@attrs.frozen
class ChannelStatistics:
    """A snapshot of one channel, from ``Receiver.statistics()``."""

    name: str | None
    """The name given to ``channel()``."""
    capacity: float
    """How many items the buffer holds before ``send`` waits (``math.inf``: unbounded)."""
    buffered: int
    """Items sent and not yet received."""
    strong_count: int
    """Live strong senders; the send half is closed when this reaches 0."""
    weak_count: int
    """Live weak senders; they never keep the channel open."""
    receiver_closed: bool
    """Whether the receiver was closed or dropped."""
    tasks_waiting_send: int
    """Tasks parked in ``send`` because the buffer is full."""
    tasks_waiting_recv: int
    """Tasks parked in ``recv`` / ``recv_many`` because the buffer is empty."""
    receivers: int = 1
    """Receiver handles not closed (``Receiver.clone()`` makes more)."""
    peak_buffer_used: int = 0
    """The most items the buffer has held at once (trio's name)."""

    @property
    def current_buffer_used(self) -> int:
        """trio's name for ``buffered``."""
        return self.buffered

    @property
    def max_buffer_size(self) -> float:
        """trio's name for ``capacity``."""
        return self.capacity

    @property
    def open_send_channels(self) -> int:
        """trio's name for ``strong_count``."""
        return self.strong_count

    @property
    def open_receive_channels(self) -> int:
        """trio's name for ``receivers``."""
        return self.receivers

    @property
    def tasks_waiting_receive(self) -> int:
        """trio's name for ``tasks_waiting_recv``."""
        return self.tasks_waiting_recv


@attrs.define(slots=True, eq=False, repr=False)
class _Chan(SharedState, Generic[T]):
    """The state that every endpoint of one channel shares."""

    capacity: float = 0
    types: ClassSpec | None = None
    buffer: deque[T] = attrs.field(factory=deque)
    send_tasks: OrderedDict[Any, tuple[T, Sender[T]]] = attrs.field(factory=OrderedDict)
    """Tasks parked in ``send`` (trio tasks, or asyncio ``Parked`` keys), with their values."""
    recv_tasks: OrderedDict[Any, object] = attrs.field(factory=OrderedDict)
    """Tasks parked in ``recv``, each with the receiver handle it waits on."""
    closed_waiters: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)
    rx_closed: bool = False
    rx_reason: str | None = None
    receivers: int = 1
    """Receiver handles not closed; the last one closed closes the receiving side."""
    peak: int = 0
    """The most items the buffer has held."""
    reserved: int = 0
    """Slots held by permits (``Sender.reserve()``) not yet used or given back."""
    weak: weakref.WeakSet[WeakSender[T]] = attrs.field(factory=weakref.WeakSet)

    def _last_sender_gone(self) -> None:
        # A task parks in recv only while the buffer is empty, so nothing more can come
        # (unless a permit is still held: its value may).
        if not self.reserved:
            self.wake_all(self.recv_tasks, self.closed_error)

    def may_admit(self) -> bool:
        """Whether a receive now lets the oldest parked sender in: the item it takes frees a
        slot that no permit holds (a rendezvous always hands the value over)."""
        if self.capacity == 0:
            return True
        held = len(self.buffer) - (1 if self.buffer else 0) + self.reserved
        return held < self.capacity

    def admit(self) -> None:
        """A slot is free: the oldest parked sender's value goes into the buffer, or the oldest
        parked ``reserve()`` gets the slot as a permit."""
        task, (value, _) = self.send_tasks.popitem(last=False)
        if value is SLOT:
            self.reserved += 1
            self.wake(task, Value(new_permit(self)))
        else:
            self.wake(task)
            self.buffer.append(value)

    def closed_error(self) -> ChannelClosed:
        if self.rx_closed:
            return ReceiverClosed(f"{self.label} was closed by its receiver", reason=self.rx_reason)
        return ChannelEnded(f"every sender of {self.label} is closed", reason=self.tx_reason)

    def close_receiver(self, drop_buffer: bool, reason: str | None = None) -> None:
        """Refuse further sends; wake everyone waiting. Idempotent, never raises."""
        if drop_buffer:
            self.buffer.clear()
        if self.rx_closed:
            return
        self.rx_closed = True
        self.rx_reason = reason
        send_tasks = self.send_tasks
        wake = self.wake
        while send_tasks:
            task, (value, _) = send_tasks.popitem(last=False)
            lost = None if value is SLOT else value
            wake(task, Error(SendError(lost, reason=reason)))
        self.wake_all(self.recv_tasks, self.closed_error)
        self.wake_all(self.closed_waiters)

    def statistics(self) -> ChannelStatistics:
        """A snapshot of the channel's counts."""
        return ChannelStatistics(
            name=self.name,
            capacity=self.capacity,
            buffered=len(self.buffer),
            strong_count=len(self.live),
            weak_count=len(self.weak),
            receiver_closed=self.rx_closed,
            tasks_waiting_send=len(self.send_tasks),
            tasks_waiting_recv=len(self.recv_tasks),
            receivers=self.receivers,
            peak_buffer_used=self.peak,
        )

    def take(self, limit: int) -> list[T]:
        """Up to ``limit`` items in order: the buffer first, then parked senders' values."""
        buffer = self.buffer
        if len(buffer) <= limit:
            out = list(buffer)
            buffer.clear()
        else:
            out = [buffer.popleft() for _ in range(limit)]
        send_tasks = self.send_tasks
        while send_tasks and len(out) < limit and self.may_admit():
            self.admit()
            if buffer:
                out.append(buffer.popleft())
        while send_tasks and len(buffer) + self.reserved < self.capacity:
            self.admit()
        self.peak = max(self.peak, len(buffer))
        return out


class _Counts:
    """``strong_count`` and ``weak_count``, the same on every endpoint of a channel."""

    __slots__ = ()
    _chan: _Chan[Any]

    @property
    def strong_count(self) -> int:
        """Live strong senders of this channel."""
        return len(self._chan.live)

    @property
    def weak_count(self) -> int:
        """Live weak senders of this channel."""
        return len(self._chan.weak)
