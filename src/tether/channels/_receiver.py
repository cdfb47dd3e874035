"""``Receiver``: the one receiving end of an mpsc channel; it closes the channel when closed
or dropped, and names who keeps it open (``holders()``)."""

from __future__ import annotations

from typing import Protocol, Self, TypeVar, final

import trio
from outcome import Error
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
from ._errors import ChannelClosed, ReceiverClosed, WouldBlock
from ._handles import Closeable, Holder

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Observer(Protocol[T_contra]):
    """What ``Receiver.observe`` calls: the receiving task came back to the channel, or took
    an item (right after ``waiting`` if one was buffered)."""

    def waiting(self) -> None: ...

    def took(self, item: T_contra) -> None: ...


@final
class Receiver(Closeable, _Counts, trio.abc.ReceiveChannel[T], metaclass=NoPublicConstructor):
    """The receive half of a ``channel()``; ``clone()`` makes more (each item goes to one).

    ``recv`` raises ``ChannelClosed`` once every strong sender is gone and the buffer is
    drained; ``async for`` then ends. Dropping the last receiver closes the channel's
    receiving side and discards the buffer.
    It is a ``trio.abc.ReceiveChannel`` (``receive`` is ``recv``), and its errors are the ones
    trio code expects: ``trio.EndOfChannel`` at the end, ``trio.ClosedResourceError`` once it
    is closed.
    """

    __slots__ = ("_chan", "_closed", "_observer")
    _chan: _Chan[T]

    def __init__(self, chan: _Chan[T]) -> None:
        self._chan = chan
        self._closed = False
        self._observer: Observer[T] | None = None

    def observe(self, observer: Observer[T] | None) -> None:
        """Tell ``observer`` whenever the receiving task comes back to the channel
        (``waiting``) and whenever it takes items (``took``): how a supervisor sees its
        worker's turns without the worker's help. ``None`` stops it."""
        self._observer = observer

    def __repr__(self) -> str:
        chan = self._chan
        return (
            f"<tether.Receiver{chan.tag} strong={len(chan.live)} weak={len(chan.weak)}"
            f" buffered={len(chan.buffer)}/{chan.capacity}{' closed' if chan.rx_closed else ''}>"
        )

    @enable_ki_protection
    async def recv(self) -> T:
        """The next item, waiting for one if the buffer is empty.

        Raises:
            ChannelClosed: every strong sender is gone (or the receiver was closed) and nothing
                is buffered.

        Cancel safety: if cancelled, no item was taken.
        """
        chan = self._chan
        if self._closed and not chan.rx_closed:
            raise self._handle_closed()
        aio = chan.aio
        if aio is None:
            aio = chan.bind()
        if not aio:
            await checkpoint_if_cancelled()
        observer = self._observer
        if observer is not None:
            observer.waiting()
        buffer = chan.buffer
        send_tasks = chan.send_tasks
        if send_tasks and (not chan.reserved or chan.may_admit()):
            chan.admit()
        if buffer:
            value = buffer.popleft()
            if observer is not None:  # taken now: no other task may see it still asking
                observer.took(value)
            if not aio:
                await cancel_shielded_checkpoint()
            return value
        if chan.rx_closed or not (chan.live or chan.reserved):
            raise chan.closed_error()
        if aio:
            got: T = await aio.park(chan.recv_tasks, self, chan)
            if observer is not None:
                observer.took(got)
            return got
        task = current_task()
        recv_tasks = chan.recv_tasks
        recv_tasks[task] = self
        task.custom_sleep_data = chan
        chan.token = current_trio_token()

        def abort(_: object) -> Abort:
            del recv_tasks[task]
            return Abort.SUCCEEDED

        item: T = await wait_task_rescheduled(abort)
        if observer is not None:
            observer.took(item)
        return item

    receive = recv
    """trio's name for ``recv`` (``trio.abc.ReceiveChannel``)."""

    @enable_ki_protection
    def try_recv(self) -> T:
        """The next item if one is ready; not a checkpoint.

        Raises:
            WouldBlock: nothing is buffered and senders remain.
            ChannelClosed: nothing is buffered and no sender remains (or the receiver closed).
        """
        chan = self._chan
        if self._closed and not chan.rx_closed:
            raise self._handle_closed()
        observer = self._observer
        if observer is not None:
            observer.waiting()
        buffer = chan.buffer
        send_tasks = chan.send_tasks
        if send_tasks and (not chan.reserved or chan.may_admit()):
            chan.admit()
        if buffer:
            value = buffer.popleft()
            if observer is not None:
                observer.took(value)
            return value
        if chan.rx_closed or not (chan.live or chan.reserved):
            raise chan.closed_error()
        raise WouldBlock

    receive_nowait = try_recv
    """trio's name for ``try_recv``."""

    def _handle_closed(self) -> ReceiverClosed:
        """This handle was closed while clones stay open: its share goes to them."""
        return ReceiverClosed(f"this receiver of {self._chan.label} was closed")

    def clone(self) -> Receiver[T]:
        """Another receiver of the same channel: each item goes to exactly one of them, and
        the receiving side closes when the last is closed (fan-out to a pool of workers).

        Raises:
            trio.ClosedResourceError: this receiver was closed.
        """
        if self._closed:
            raise self._handle_closed()
        self._chan.receivers += 1
        return Receiver._create(self._chan)

    @enable_ki_protection
    async def recv_many(self, limit: int) -> list[T]:
        """Every buffered item, up to ``limit``, after one checkpoint; waits for at least one.

        Raises:
            ValueError: ``limit`` < 1.
            ChannelClosed: as for ``recv``.

        Cancel safety: if cancelled, no item was taken.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit!r}")
        chan = self._chan
        aio = chan.aio
        if aio is None:
            aio = chan.bind()
        if not aio:
            await checkpoint_if_cancelled()
        batch = chan.take(limit)
        if batch:
            observer = self._observer
            if observer is not None:
                observer.waiting()
                for item in batch:
                    observer.took(item)
            if not aio:
                await cancel_shielded_checkpoint()
            return batch
        first = await self.recv()
        if limit == 1:
            return [first]
        batch = chan.take(limit - 1)
        if self._observer is not None:
            for item in batch:
                self._observer.took(item)
        batch.insert(0, first)
        return batch

    @enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Refuse further sends; what is buffered stays receivable. Idempotent.

        Tasks parked in ``send`` get ``SendError`` with their value back, and ``reason`` as
        its ``reason``; ``Sender.closed()`` returns. With clones open, only this handle closes
        (it can no longer receive) until the last of them is closed.
        """
        if self._closed:
            return
        self._closed = True
        chan = self._chan
        chan.receivers -= 1
        if chan.receivers <= 0:
            chan.close_receiver(drop_buffer=False, reason=reason)
            return
        recv_tasks = chan.recv_tasks
        for task in [task for task, handle in recv_tasks.items() if handle is self]:
            del recv_tasks[task]
            chan.wake(task, Error(self._handle_closed()))

    def __del__(self) -> None:
        chan = getattr(self, "_chan", None)
        if chan is None or getattr(self, "_closed", True):
            if chan is not None and chan.rx_closed and chan.buffer and chan.receivers <= 0:
                chan.call_soon(chan.close_receiver, True)
            return
        self._closed = True
        chan.call_soon(_drop_receiver, chan)

    def holders(self) -> tuple[Holder, ...]:
        """The live strong senders (oldest first): who keeps this channel open, and where."""
        return self._chan.holders()

    def statistics(self) -> ChannelStatistics:
        """A snapshot of the channel's counts."""
        return self._chan.statistics()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.recv()
        except ChannelClosed:
            raise StopAsyncIteration from None


def _drop_receiver(chan: _Chan[object]) -> None:
    """A receiver was dropped unclosed: the last one gone closes the side and drops the
    buffer (nobody is left to receive it)."""
    chan.receivers -= 1
    if chan.receivers <= 0:
        chan.close_receiver(drop_buffer=True)
