"""The latest-value channel: ``watch(initial)``, for state that many tasks observe.

Receivers see the newest value, not every value. Senders are counted references like
``Sender``; when the last one goes, a receiver first sees the final value, then
``ChannelClosed`` from ``changed()``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar, Generic, TypeVar, final

import attrs
import trio
from trio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from .._util import NoPublicConstructor
from ._errors import ChannelClosed, ChannelEnded, SendError
from ._handles import Closeable, Holder, SharedState, StrongHandle, checkpoint, park

T = TypeVar("T")


@attrs.define(slots=True, eq=False, repr=False)
class _Watch(SharedState, Generic[T]):
    kind: ClassVar[str] = "watch"
    value: T | None = None
    version: int = 0
    receivers: int = 1
    """Live receivers; when it reaches 0 sends fail and ``WatchSender.closed()`` returns."""
    changed_waiters: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)
    closed_waiters: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)

    def _last_sender_gone(self) -> None:
        self.wake_all(self.changed_waiters)

    def drop_receiver(self) -> None:
        self.receivers -= 1
        if self.receivers == 0:
            self.wake_all(self.closed_waiters)


def watch(initial: T, *, name: str | None = None) -> tuple[WatchSender[T], WatchReceiver[T]]:
    """Open a watch channel holding ``initial``; return a sender and a first receiver.

    Values are not type-checked at run time (the element type is inferred from ``initial``).

    Example:
        ```python
        state_tx, state_rx = tether.watch("starting")
        state_tx.send("ready")
        assert state_rx.borrow() == "ready"
        ```
    """
    state: _Watch[T] = _Watch(name, value=initial)
    return WatchSender[T]._create(state, None, 2), WatchReceiver[T]._create(state, 0)


@final
class WatchSender(StrongHandle, Generic[T], metaclass=NoPublicConstructor):
    """The send half of a ``watch()``: replaces the value and wakes every receiver."""

    __slots__ = ("_state",)

    def __init__(self, state: _Watch[T], name: str | None, depth: int) -> None:
        self._state = state
        self._register(state, name, depth + 1)

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<tether.WatchSender{state.tag} version={state.version}"
            f" strong={len(state.live)} receivers={state.receivers}>"
        )

    @trio.lowlevel.enable_ki_protection
    def send(self, value: T) -> None:
        """Make ``value`` current and wake every receiver waiting in ``changed()``.

        Not a checkpoint.

        Raises:
            SendError: no receiver is left; the value is not stored and is in ``.value``.
            trio.ClosedResourceError, RuntimeError: this handle was closed or moved.
        """
        if self._key is None:
            self._unusable()
        state = self._state
        if state.receivers == 0:
            raise SendError(value)
        state.value = value
        state.version += 1
        state.wake_all(state.changed_waiters)

    def borrow(self) -> T:
        """The current value."""
        return self._state.value  # type: ignore[return-value]

    def subscribe(self) -> WatchReceiver[T]:
        """A new receiver that has seen the current value."""
        state = self._state
        state.receivers += 1
        return WatchReceiver[T]._create(state, state.version)

    def clone(self, *, name: str | None = None) -> WatchSender[T]:
        """One more strong sender; receivers are closed only when all are gone."""
        if self._key is None:
            self._unusable()
        return WatchSender._create(self._state, name, 2)

    @property
    def strong_count(self) -> int:
        """Live strong senders."""
        return len(self._state.live)

    @property
    def receiver_count(self) -> int:
        """Live receivers."""
        return self._state.receivers

    def is_closed(self) -> bool:
        """Whether every receiver is closed or dropped."""
        return self._state.receivers == 0

    @trio.lowlevel.enable_ki_protection
    async def closed(self) -> None:
        """Wait until every receiver is closed or dropped. Cancel safety: safe."""
        state = self._state
        if state.receivers == 0:
            await checkpoint(state)
        else:
            await park(state.closed_waiters, state)


@final
class WatchReceiver(Closeable, Generic[T], metaclass=NoPublicConstructor):
    """A receive half of a ``watch()``: the current value and a wait for the next one."""

    __slots__ = ("_closed", "_seen", "_state")

    def __init__(self, state: _Watch[T], seen: int) -> None:
        self._state = state
        self._seen = seen
        self._closed = False

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<tether.WatchReceiver{state.tag} seen={self._seen}/{state.version}"
            f" strong={len(state.live)}>"
        )

    def borrow(self) -> T:
        """The current value, without marking it seen."""
        return self._state.value  # type: ignore[return-value]

    def borrow_and_update(self) -> T:
        """The current value, marked seen."""
        state = self._state
        self._seen = state.version
        return state.value  # type: ignore[return-value]

    def has_changed(self) -> bool:
        """Whether a value was sent that this receiver has not seen.

        Raises:
            ChannelClosed: nothing unseen and every sender is gone.
        """
        state = self._state
        if state.version != self._seen:
            return True
        if not state.live:
            raise self._closed_error()
        return False

    @trio.lowlevel.enable_ki_protection
    async def changed(self) -> None:
        """Wait for a value this receiver has not seen and mark it seen.

        Raises:
            ChannelClosed: every sender is gone and the last value was already seen.
            trio.ClosedResourceError: this receiver was closed.

        Cancel safety: safe; if cancelled, nothing is marked seen.
        """
        if self._closed:
            raise trio.ClosedResourceError("this watch receiver was closed")
        state = self._state
        aio = state.aio
        if aio is None:
            aio = state.bind()
        if not aio:
            await checkpoint_if_cancelled()
        if state.version != self._seen:
            self._seen = state.version
            if not aio:
                await cancel_shielded_checkpoint()
            return
        while state.version == self._seen:
            if not state.live:
                raise self._closed_error()
            await park(state.changed_waiters, state)
        self._seen = state.version

    def _closed_error(self) -> ChannelClosed:
        state = self._state
        return ChannelEnded(f"every sender of {state.label} is closed", reason=state.tx_reason)

    def clone(self) -> WatchReceiver[T]:
        """Another receiver that has seen what this one has seen."""
        if self._closed:
            raise trio.ClosedResourceError("this watch receiver was closed")
        self._state.receivers += 1
        return WatchReceiver._create(self._state, self._seen)

    def close(self, reason: str | None = None) -> None:
        """Drop this receiver; when the last goes, senders fail and ``closed()`` returns.

        ``reason`` is accepted for symmetry with the other handles; a watch keeps none."""
        if not self._closed:
            self._closed = True
            self._state.drop_receiver()

    def __del__(self) -> None:
        state = getattr(self, "_state", None)
        if state is not None and not self._closed:
            self._closed = True
            state.call_soon(state.drop_receiver)

    def holders(self) -> tuple[Holder, ...]:
        """The live strong senders (oldest first): who keeps this watch open, and where."""
        return self._state.holders()
