"""The broadcast channel: ``broadcast(T, capacity)``. Every subscriber receives every value
sent after it subscribed; a sender never waits. A subscriber that falls more than ``capacity``
values behind loses the oldest and is told how many (``Lagged``), then continues, as with
tokio's ``broadcast``. Senders are counted references like every tether sender: the last one
closed ends every subscriber's loop once it has read what is left."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar, Generic, Self, TypeVar, final

import attrs
from trio.lowlevel import (
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    enable_ki_protection,
)

from .._util import NoPublicConstructor
from ._errors import ChannelEnded, ReceiverClosed, SendError
from ._handles import Closeable, Holder, SharedState, StrongHandle, park
from ._typecheck import ClassSpec, isinstance_spec, wrong_type

T = TypeVar("T")


class Lagged(Exception):
    """This subscriber fell more than the channel's capacity behind: ``missed`` values were
    dropped for it. The next ``recv`` returns the oldest value still kept."""

    def __init__(self, missed: int) -> None:
        super().__init__(f"this subscriber fell behind and missed {missed} values")
        self.missed = missed
        """How many values this subscriber will never see."""


@attrs.define(slots=True, eq=False, repr=False)
class _Broadcast(SharedState, Generic[T]):
    kind: ClassVar[str] = "broadcast"
    capacity: int = 1
    types: ClassSpec | None = None
    ring: list[Any] = attrs.field(factory=list)
    """The last ``capacity`` values: value number ``n`` is at ``ring[n % capacity]``."""
    next: int = 0
    """The number the next value sent will have."""
    receivers: int = 0
    waiters: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)

    def _last_sender_gone(self) -> None:
        self.wake_all(self.waiters)


def broadcast(
    item_type: type[T], capacity: int, name: str | None = None, *, check_types: bool = True
) -> tuple[BroadcastSender[T], BroadcastReceiver[T]]:
    """Open a broadcast channel keeping the last ``capacity`` values; return its first sender
    and a first subscriber (``subscribe()`` makes more).

    Raises:
        TypeError: ``capacity`` is not an integer.
        ValueError: ``capacity`` < 1.
    """
    if not isinstance(capacity, int):
        raise TypeError(f"capacity must be an integer, not {capacity!r}")
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, not {capacity!r}")
    types = isinstance_spec(item_type) if check_types else None
    state: _Broadcast[T] = _Broadcast(name, capacity=capacity, types=types,
                                      ring=[None] * capacity)  # fmt: skip
    return BroadcastSender[T]._create(state, None, 2), BroadcastReceiver[T]._create(state)


@final
class BroadcastSender(StrongHandle, Generic[T], metaclass=NoPublicConstructor):
    """The send half of a ``broadcast()``: a counted reference; ``send`` never waits."""

    __slots__ = ()
    _shared: _Broadcast[T]

    def __init__(self, state: _Broadcast[T], name: str | None, depth: int) -> None:
        self._register(state, name, depth + 1)

    def __repr__(self) -> str:
        state = self._shared
        return f"<tether.BroadcastSender{state.tag} subscribers={state.receivers}>"

    @enable_ki_protection
    def send(self, value: T) -> int:
        """Keep ``value`` for every subscriber (dropping the oldest beyond ``capacity``) and
        wake them; not a checkpoint, never waits. Returns how many subscribers there are.

        Raises:
            SendError: no subscriber is left; the value is in ``.value``.
            TypeError: ``value`` is not of the channel's element type.
            trio.ClosedResourceError: this handle was closed.
        """
        state = self._shared
        if self._key is None:
            self._unusable()
        if state.types is not None and not isinstance(value, state.types):
            raise wrong_type(value, state.types)
        if not state.receivers:
            raise SendError(value)
        number = state.next
        state.ring[number % state.capacity] = value
        state.next = number + 1
        if state.waiters:
            state.wake_all(state.waiters)
        return state.receivers

    def subscribe(self) -> BroadcastReceiver[T]:
        """A new subscriber that receives the values sent from now on."""
        if self._key is None:
            self._unusable()
        return BroadcastReceiver[T]._create(self._shared)

    def clone(self) -> BroadcastSender[T]:
        """One more strong sender."""
        if self._key is None:
            self._unusable()
        return BroadcastSender._create(self._shared, None, 2)


@final
class BroadcastReceiver(Closeable, Generic[T], metaclass=NoPublicConstructor):
    """One subscriber of a ``broadcast()``: it receives every value sent after it subscribed,
    unless it falls more than ``capacity`` behind (``Lagged``)."""

    __slots__ = ("_closed", "_next", "_state")

    def __init__(self, state: _Broadcast[T], at: int | None = None) -> None:
        self._state = state
        self._next = state.next if at is None else at
        self._closed = False
        state.receivers += 1

    def __repr__(self) -> str:
        state = self._state
        return f"<tether.BroadcastReceiver{state.tag} behind={state.next - self._next}>"

    @enable_ki_protection
    async def recv(self) -> T:
        """The next value this subscriber has not seen, waiting for one.

        Raises:
            Lagged: values this subscriber had not read were dropped; the next call goes on
                from the oldest value kept.
            ChannelEnded: every sender is gone and this subscriber read everything.
            ReceiverClosed: this subscriber was closed.
        """
        state = self._state
        if self._closed:
            raise ReceiverClosed(f"this subscriber of {state.label} was closed")
        aio = state.aio
        if aio is None:
            aio = state.bind()
        if not aio:
            await checkpoint_if_cancelled()
        number = self._next
        while number >= state.next:
            if not state.live:
                raise ChannelEnded(f"every sender of {state.label} is closed",
                                   reason=state.tx_reason)  # fmt: skip
            await park(state.waiters, state)
        oldest = state.next - state.capacity
        if number < oldest:
            self._next = oldest
            raise Lagged(oldest - number)
        self._next = number + 1
        value: T = state.ring[number % state.capacity]
        if not aio:
            await cancel_shielded_checkpoint()
        return value

    def resubscribe(self) -> BroadcastReceiver[T]:
        """Another subscriber, starting from the values sent from now on."""
        return BroadcastReceiver._create(self._state)

    @enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Unsubscribe; once no subscriber is left, sends fail. Idempotent."""
        if not self._closed:
            self._closed = True
            self._state.receivers -= 1

    def __del__(self) -> None:
        state: Any = getattr(self, "_state", None)
        if state is not None and not getattr(self, "_closed", True):
            self._closed = True
            state.call_soon(_unsubscribe, state)

    def holders(self) -> tuple[Holder, ...]:
        """The live strong senders (oldest first)."""
        return self._state.holders()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.recv()
        except ChannelEnded:
            raise StopAsyncIteration from None


def _unsubscribe(state: _Broadcast[Any]) -> None:
    state.receivers -= 1
