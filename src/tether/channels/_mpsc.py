"""The multi-producer, single-consumer channel: ``channel(T, capacity, name)``.

Built on ``trio.lowlevel`` (parking, rescheduling, checkpoints) with the same fast paths as
``trio.open_memory_channel``; what tether adds is the ownership model. Senders are counted
references (``clone``, ``downgrade``, ``move``, drop), the receiver closing keeps what is
buffered, and ``holders()`` names whoever keeps the channel open. ADR 0002 says why this is not
a wrapper around trio's memory channel.
"""

from __future__ import annotations

import math
from typing import Any, Generic, TypeVar, final, overload

import trio
from outcome import Error, Value
from trio.lowlevel import (
    Abort,
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    current_task,
    current_trio_token,
    enable_ki_protection,
    wait_task_rescheduled,
)

from .._util import NoPublicConstructor
from ._chan import ChannelStatistics, _Chan, _Counts
from ._errors import SendError, WouldBlock
from ._handles import StrongHandle, checkpoint, park
from ._permit import SLOT, Permit, new_permit
from ._receiver import Receiver
from ._typecheck import isinstance_spec, wrong_type

__all__ = ["ChannelStatistics", "Receiver", "Sender", "WeakSender", "channel"]

T = TypeVar("T")


@overload
def channel(
    item_type: type[T],
    capacity: float = 0,
    name: str | None = None,
    *,
    check_types: bool = True,
) -> tuple[Sender[T], Receiver[T]]: ...
@overload
def channel(
    item_type: object,
    capacity: float = 0,
    name: str | None = None,
    *,
    check_types: bool = True,
) -> tuple[Sender[Any], Receiver[Any]]: ...
def channel(
    item_type: object,
    capacity: float = 0,
    name: str | None = None,
    *,
    check_types: bool = True,
) -> tuple[Sender[Any], Receiver[Any]]:
    """Open a channel of ``item_type`` items; return its first sender and its receiver.

    Args:
        item_type: what ``send`` accepts: a class or a union of classes, checked with
            ``isinstance`` on every send (``typing.Any`` accepts everything). For a union,
            annotate the result, e.g. ``tx: Sender[int | str]``.
        capacity: items buffered before ``send`` waits: 0 (a rendezvous, the default) or more,
            ``math.inf`` for unbounded.
        name: shown in ``repr``, errors, ``holders()`` and the deadlock report.
        check_types: ``False`` skips the ``isinstance`` check.

    Raises:
        TypeError: ``capacity`` is not an integer or ``math.inf`` (as trio's
            ``open_memory_channel``), or ``item_type`` cannot be checked at run time and
            ``check_types`` is on.
        ValueError: ``capacity`` is negative.

    Example:
        ```python
        tx, rx = tether.channel(int, capacity=16, name="numbers")
        async with trio.open_nursery() as nursery:
            async def produce(tx: tether.Sender[int]) -> None:
                with tx:
                    for i in range(3):
                        await tx.send(i)
            nursery.start_soon(produce, tx.move())
            assert [i async for i in rx] == [0, 1, 2]
        ```
    """
    if capacity != math.inf and not isinstance(capacity, int):
        raise TypeError(f"capacity must be an integer or math.inf, not {capacity!r}")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, not {capacity!r}")
    types = isinstance_spec(item_type) if check_types else None
    chan: _Chan[Any] = _Chan(name, capacity=capacity, types=types)
    return Sender._create(chan, None, 2), Receiver._create(chan)


@final
class Sender(StrongHandle, _Counts, trio.abc.SendChannel[T], metaclass=NoPublicConstructor):
    """The send half of a ``channel()``: a counted reference that keeps the channel open.

    Created by ``channel()``, ``clone()``, ``move()`` and ``WeakSender.upgrade()``. Close it
    (``close()``, ``with``, ``async with``) when done; one dropped while open is closed by its
    finalizer with a ``ResourceWarning`` naming where it was created. It is a
    ``trio.abc.SendChannel``: code written for trio's channels takes it.
    """

    __slots__ = ("_chan",)
    _chan: _Chan[T]

    def __init__(self, chan: _Chan[T], name: str | None, depth: int) -> None:
        self._chan = chan
        self._register(chan, name, depth + 1)

    def __repr__(self) -> str:
        state = "open" if self._key is not None else "moved" if self._moved_at else "closed"
        return f"<tether.Sender{self._chan.tag} {state} strong={len(self._chan.live)}>"

    @enable_ki_protection
    async def send(self, value: T) -> None:
        """Send ``value``, waiting while the buffer is full.

        Raises:
            SendError: the receiver is closed; the value is in ``.value``.
            TypeError: ``value`` is not an instance of the channel's element type.
            trio.ClosedResourceError: this handle was closed.
            RuntimeError: this handle was moved.

        Cancel safety: if cancelled, the value was not sent.
        """
        chan = self._chan
        if self._key is None:
            self._unusable()
        types = chan.types
        if types is not None and not isinstance(value, types):
            raise wrong_type(value, types)
        aio = chan.aio
        if aio is None:
            aio = chan.bind()
        if not aio:
            await checkpoint_if_cancelled()
        if chan.rx_closed:
            raise SendError(value, reason=chan.rx_reason)
        recv_tasks = chan.recv_tasks
        buffered = len(chan.buffer)
        if recv_tasks:
            task, _ = recv_tasks.popitem(last=False)
            chan.wake(task, Value(value))
        elif buffered + chan.reserved < chan.capacity:
            chan.buffer.append(value)
            if buffered >= chan.peak:
                chan.peak = buffered + 1
        elif aio:
            await aio.park(chan.send_tasks, (value, self), chan)
            return
        else:
            task = current_task()
            send_tasks = chan.send_tasks
            send_tasks[task] = (value, self)
            task.custom_sleep_data = chan
            chan.token = current_trio_token()

            def abort(_: object) -> Abort:
                del send_tasks[task]
                return Abort.SUCCEEDED

            await wait_task_rescheduled(abort)
            return
        if not aio:
            await cancel_shielded_checkpoint()

    @enable_ki_protection
    def try_send(self, value: T) -> None:
        """Send ``value`` now or not at all; not a checkpoint.

        Raises:
            WouldBlock: the buffer is full.
            SendError: the receiver is closed; the value is in ``.value``.
            TypeError, trio.ClosedResourceError, RuntimeError: as for ``send``.
        """
        # The same steps as send's fast path, written out again: a shared helper would add a
        # call to every message on the hot path.
        chan = self._chan
        if self._key is None:
            self._unusable()
        types = chan.types
        if types is not None and not isinstance(value, types):
            raise wrong_type(value, types)
        if chan.rx_closed:
            raise SendError(value, reason=chan.rx_reason)
        recv_tasks = chan.recv_tasks
        buffered = len(chan.buffer)
        if recv_tasks:
            task, _ = recv_tasks.popitem(last=False)
            chan.wake(task, Value(value))
        elif buffered + chan.reserved < chan.capacity:
            chan.buffer.append(value)
            if buffered >= chan.peak:
                chan.peak = buffered + 1
        else:
            raise WouldBlock

    send_nowait = try_send
    """trio's name for ``try_send``."""

    @enable_ki_protection
    async def reserve(self) -> Permit[T]:
        """Hold room for one value before it exists, waiting while the buffer is full; the
        ``Permit``'s ``send`` then never waits and never fails for lack of room (tokio's
        ``reserve``). A permit closed or dropped unused gives the room back.

        Raises:
            ValueError: the channel has no buffer (capacity 0: a value is handed over, not
                stored, so there is no room to hold).
            SendError: the receiver is closed (``.value`` is ``None``).
            trio.ClosedResourceError, RuntimeError: as for ``send``.

        Cancel safety: if cancelled, nothing is held.
        """
        chan = self._chan
        if self._key is None:
            self._unusable()
        if chan.capacity == 0:
            raise ValueError(f"reserve() needs a buffer; {chan.label} has capacity 0")
        aio = chan.aio
        if aio is None:
            aio = chan.bind()
        if not aio:
            await checkpoint_if_cancelled()
        if chan.rx_closed:
            raise SendError(None, reason=chan.rx_reason)
        if len(chan.buffer) + chan.reserved < chan.capacity and not chan.send_tasks:
            chan.reserved += 1
            permit: Permit[T] = new_permit(chan)
            if not aio:
                await cancel_shielded_checkpoint()
            return permit
        if aio:
            held: Permit[T] = await aio.park(chan.send_tasks, (SLOT, self), chan)
            return held
        task = current_task()
        send_tasks = chan.send_tasks
        send_tasks[task] = (SLOT, self)  # type: ignore[assignment]
        task.custom_sleep_data = chan
        chan.token = current_trio_token()

        def abort(_: object) -> Abort:
            del send_tasks[task]
            return Abort.SUCCEEDED

        granted: Permit[T] = await wait_task_rescheduled(abort)
        return granted

    def clone(self, *, name: str | None = None) -> Sender[T]:
        """One more strong sender; the channel stays open until it is closed too."""
        if self._key is None:
            self._unusable()
        return Sender._create(self._chan, name, 2)

    def move(self) -> Sender[T]:
        """Hand this reference to a new handle and kill this one.

        Use it where the handle changes owner (``nursery.start_soon(loop, tx.move())``), so no
        stray clone stays behind to keep the channel open. Any later use of this handle raises
        ``RuntimeError`` naming where it was moved; ``close()`` on it is a no-op.
        """
        if self._key is None:
            self._unusable()
        record = self._chan.live[self._key]
        moved: Sender[T] = Sender._create(self._chan, record[0], 2)
        self._chan.release(self._take_key(1))
        return moved

    def downgrade(self) -> WeakSender[T]:
        """A ``WeakSender``: sends only through ``upgrade()``; never keeps the channel open."""
        if self._key is None:
            self._unusable()
        return WeakSender[T]._create(self._chan)

    def is_closed(self) -> bool:
        """Whether the receiver is closed or dropped (sends will fail)."""
        return self._chan.rx_closed

    def statistics(self) -> ChannelStatistics:
        """A snapshot of the channel's counts (the same as the receiver's)."""
        return self._chan.statistics()

    @enable_ki_protection
    async def closed(self) -> None:
        """Wait until the receiver is closed or dropped.

        Cancel safety: safe; nothing is consumed.
        """
        chan = self._chan
        if chan.rx_closed:
            await checkpoint(chan)
        else:
            await park(chan.closed_waiters, chan)

    def _closing(self) -> None:
        send_tasks = self._chan.send_tasks
        mine = [task for task, (_, handle) in send_tasks.items() if handle is self]
        for task in mine:
            del send_tasks[task]
            self._chan.wake(task, Error(trio.ClosedResourceError("the sender was closed mid-send")))


@final
class WeakSender(_Counts, Generic[T], metaclass=NoPublicConstructor):
    """A sender that does not keep the channel open; ``upgrade()`` it to send.

    An actor can hold a weak sender to itself without keeping its own mailbox open forever.
    """

    __slots__ = ("__weakref__", "_chan")
    _chan: _Chan[T]

    def __init__(self, chan: _Chan[T]) -> None:
        self._chan = chan
        chan.weak.add(self)

    def __repr__(self) -> str:
        chan = self._chan
        return f"<tether.WeakSender{chan.tag} strong={len(chan.live)}>"

    def upgrade(self) -> Sender[T] | None:
        """A new strong sender, or ``None`` once every strong sender is gone."""
        if not self._chan.live:
            return None
        return Sender[T]._create(self._chan, None, 2)
