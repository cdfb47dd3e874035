"""The state every endpoint of one mpsc channel shares (``_Chan``), its statistics, and the
reference counts every endpoint reports."""

from __future__ import annotations

import weakref
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
from outcome import Error
from trio.lowlevel import (
    Task,
    reschedule,
)

from ._errors import ChannelClosed, SendError
from ._handles import SharedState, wake_all
from ._typecheck import ClassSpec, describe

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


@attrs.define(slots=True, eq=False, repr=False)
class _Chan(SharedState, Generic[T]):
    """The state that every endpoint of one channel shares."""

    capacity: float = 0
    types: ClassSpec | None = None
    buffer: deque[T] = attrs.field(factory=deque)
    send_tasks: OrderedDict[Task, tuple[T, Sender[T]]] = attrs.field(factory=OrderedDict)
    recv_tasks: OrderedDict[Task, None] = attrs.field(factory=OrderedDict)
    closed_waiters: OrderedDict[Task, None] = attrs.field(factory=OrderedDict)
    rx_closed: bool = False
    weak: weakref.WeakSet[WeakSender[T]] = attrs.field(factory=weakref.WeakSet)

    def _last_sender_gone(self) -> None:
        # A task parks in recv only while the buffer is empty, so nothing more can come.
        wake_all(self.recv_tasks, self.closed_error)

    def closed_error(self) -> ChannelClosed:
        if self.rx_closed:
            return ChannelClosed(f"{self.label} was closed by its receiver")
        return ChannelClosed(f"every sender of {self.label} is closed")

    def close_receiver(self, drop_buffer: bool) -> None:
        """Refuse further sends; wake everyone waiting. Idempotent, never raises."""
        if drop_buffer:
            self.buffer.clear()
        if self.rx_closed:
            return
        self.rx_closed = True
        send_tasks = self.send_tasks
        while send_tasks:
            task, (value, _) = send_tasks.popitem(last=False)
            reschedule(task, Error(SendError(value)))
        wake_all(self.recv_tasks, self.closed_error)
        wake_all(self.closed_waiters)

    def take(self, limit: int) -> list[T]:
        """Up to ``limit`` items in order: the buffer first, then parked senders' values."""
        buffer = self.buffer
        if len(buffer) <= limit:
            out = list(buffer)
            buffer.clear()
        else:
            out = [buffer.popleft() for _ in range(limit)]
        send_tasks = self.send_tasks
        while send_tasks and len(out) < limit:
            task, (value, _) = send_tasks.popitem(last=False)
            reschedule(task)
            out.append(value)
        while send_tasks and len(buffer) < self.capacity:
            task, (value, _) = send_tasks.popitem(last=False)
            reschedule(task)
            buffer.append(value)
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


def wrong_type(value: object, types: ClassSpec) -> TypeError:
    return TypeError(
        f"this channel carries {describe(types)}, not {type(value).__qualname__}: {value!r:.80}"
    )
