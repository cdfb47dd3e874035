"""The one-value channel: ``oneshot(T)``, for a reply that comes once or never.

The sender is a strong handle like ``Sender``: dropped unsent, it wakes the receiver with
``ChannelClosed`` instead of leaving it waiting forever.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator
from typing import Any, ClassVar, Generic, TypeVar, final, overload

import attrs
from outcome import Value
from trio.lowlevel import (
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    enable_ki_protection,
)

from .._util import NoPublicConstructor
from ._errors import ChannelClosed, ChannelEnded, SendError, WouldBlock
from ._handles import Closeable, Holder, SharedState, StrongHandle, checkpoint, park
from ._typecheck import ClassSpec, describe, isinstance_spec

T = TypeVar("T")

_PENDING, _SENT, _TAKEN = range(3)


@attrs.define(slots=True, eq=False, repr=False)
class _Oneshot(SharedState, Generic[T]):
    kind: ClassVar[str] = "oneshot"
    types: ClassSpec | None = None
    stage: int = _PENDING
    value: T | None = None
    rx_closed: bool = False
    rx_reason: str | None = None
    recv_tasks: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)
    closed_waiters: OrderedDict[Any, None] = attrs.field(factory=OrderedDict)

    def _last_sender_gone(self) -> None:
        if self.stage == _PENDING:
            self.wake_all(self.recv_tasks, self.unsent_error)

    def unsent_error(self) -> ChannelClosed:
        return ChannelEnded(f"{self.label}: the sender was dropped unsent", reason=self.tx_reason)

    def close_receiver(self, reason: str | None = None) -> None:
        if not self.rx_closed:
            self.rx_closed = True
            self.rx_reason = reason
            self.wake_all(self.recv_tasks, self.unsent_error)
            self.wake_all(self.closed_waiters)


@overload
def oneshot(
    item_type: type[T], *, name: str | None = None, check_types: bool = True
) -> tuple[OneshotSender[T], OneshotReceiver[T]]: ...
@overload
def oneshot(
    item_type: object, *, name: str | None = None, check_types: bool = True
) -> tuple[OneshotSender[Any], OneshotReceiver[Any]]: ...
def oneshot(
    item_type: object, *, name: str | None = None, check_types: bool = True
) -> tuple[OneshotSender[Any], OneshotReceiver[Any]]:
    """Open a channel for exactly one ``item_type`` value.

    ``tx.send(v)`` is synchronous and allowed once; ``await rx`` returns ``v``, or raises
    ``ChannelClosed`` if the sender was closed or dropped unsent. ``item_type`` and
    ``check_types`` work as for ``channel()``.

    Example:
        ```python
        reply_tx, reply_rx = tether.oneshot(int)
        reply_tx.send(42)
        assert await reply_rx == 42
        ```
    """
    types = isinstance_spec(item_type) if check_types else None
    state: _Oneshot[Any] = _Oneshot(name, types=types)
    return OneshotSender._create(state, 2), OneshotReceiver._create(state)


@final
class OneshotSender(StrongHandle, Generic[T], metaclass=NoPublicConstructor):
    """The send half of a ``oneshot()``: sends once, or closes and wakes the receiver."""

    __slots__ = ("_state",)

    def __init__(self, state: _Oneshot[T], depth: int) -> None:
        self._state = state
        self._register(state, None, depth + 1)

    def __repr__(self) -> str:
        stages = ("pending", "sent", "received")
        return f"<tether.OneshotSender{self._state.tag} {stages[self._state.stage]}>"

    @enable_ki_protection
    def send(self, value: T) -> None:
        """Deliver ``value``; not a checkpoint. The handle is spent afterwards.

        Raises:
            SendError: the receiver is closed or dropped; the value is in ``.value``.
            TypeError: ``value`` is not of the channel's element type.
            RuntimeError: this oneshot already sent.
            trio.ClosedResourceError: this handle was closed.
        """
        state = self._state
        if state.stage != _PENDING:
            raise RuntimeError(f"{state.label} already sent its value")
        if self._key is None:
            self._unusable()
        if state.types is not None and not isinstance(value, state.types):
            raise TypeError(
                f"this oneshot carries {describe(state.types)}, not {type(value).__qualname__}"
            )
        if state.rx_closed:
            raise SendError(value, reason=state.rx_reason)
        state.value = value
        state.stage = _SENT
        if state.recv_tasks:
            task, _ = state.recv_tasks.popitem(last=False)
            state.stage = _TAKEN
            state.value = None
            state.wake(task, Value(value))
        self.close()

    def is_closed(self) -> bool:
        """Whether the receiver is closed or dropped."""
        return self._state.rx_closed

    @enable_ki_protection
    async def closed(self) -> None:
        """Wait until the receiver is closed or dropped. Cancel safety: safe."""
        state = self._state
        if state.rx_closed:
            await checkpoint(state)
        else:
            await park(state.closed_waiters, state)


@final
class OneshotReceiver(Closeable, Generic[T], metaclass=NoPublicConstructor):
    """The receive half of a ``oneshot()``: ``await rx`` gives the value once."""

    __slots__ = ("_state",)

    def __init__(self, state: _Oneshot[T]) -> None:
        self._state = state

    def __repr__(self) -> str:
        state = self._state
        return f"<tether.OneshotReceiver{state.tag} senders={len(state.live)}>"

    def __await__(self) -> Generator[Any, None, T]:
        return self.recv().__await__()

    @enable_ki_protection
    async def recv(self) -> T:
        """The value, waiting for it if it is not sent yet.

        Raises:
            ChannelClosed: the sender was closed or dropped unsent, or this receiver was closed
                before a value came.
            RuntimeError: the value was already received.

        Cancel safety: if cancelled, the value (if any) stays receivable.
        """
        state = self._state
        aio = state.aio
        if aio is None:
            aio = state.bind()
        if not aio:
            await checkpoint_if_cancelled()
        if state.stage == _SENT:
            value: T = state.value  # type: ignore[assignment]
            state.value = None
            state.stage = _TAKEN
            if not aio:
                await cancel_shielded_checkpoint()
            return value
        self._check_pending()
        if state.recv_tasks:
            raise RuntimeError(f"another task is already awaiting {state.label}")
        return await park(state.recv_tasks, state)  # type: ignore[no-any-return]

    @enable_ki_protection
    def try_recv(self) -> T:
        """The value if it was sent; not a checkpoint.

        Raises:
            WouldBlock: not sent yet.
            ChannelClosed, RuntimeError: as for ``recv``.
        """
        state = self._state
        if state.stage == _SENT:
            value: T = state.value  # type: ignore[assignment]
            state.value = None
            state.stage = _TAKEN
            return value
        self._check_pending()
        raise WouldBlock

    def _check_pending(self) -> None:
        state = self._state
        if state.stage == _TAKEN:
            raise RuntimeError(f"{state.label}: the value was already received")
        if state.rx_closed or not state.live:
            raise state.unsent_error()

    @enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Refuse the value from now on; one already sent stays receivable. Idempotent.

        A later ``send`` raises ``SendError`` whose ``reason`` is ``reason``."""
        self._state.close_receiver(reason)

    def __del__(self) -> None:
        state = getattr(self, "_state", None)
        if state is not None and not state.rx_closed:
            state.call_soon(state.close_receiver)

    def holders(self) -> tuple[Holder, ...]:
        """The sender, while it is live and unsent."""
        return self._state.holders()
