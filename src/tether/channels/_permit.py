"""``Permit``: room in a channel's buffer held before the value exists (``Sender.reserve()``),
so a producer never builds a value it cannot send. Sending through a permit never waits and
never fails for lack of room; a permit closed or dropped unused gives its room back."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

from outcome import Value
from trio.lowlevel import enable_ki_protection

from .._util import NoPublicConstructor
from ._errors import SendError
from ._handles import Closeable
from ._typecheck import wrong_type

if TYPE_CHECKING:
    from ._chan import _Chan

T = TypeVar("T")


class Reserve(enum.Enum):
    """What a task parked in ``reserve()`` puts where a parked ``send`` puts its value."""

    SLOT = enum.auto()


SLOT = Reserve.SLOT
"""``Reserve.SLOT`` as a module constant: an enum member looked up on its class costs a
lookup through the metaclass, and this is compared on every admitted sender."""


@final
class Permit(Closeable, Generic[T], metaclass=NoPublicConstructor):
    """One slot of a channel's buffer, held for this permit's one value."""

    __slots__ = ("_chan", "_used")
    _chan: _Chan[T]

    def __init__(self, chan: _Chan[T]) -> None:
        self._chan = chan
        self._used = False

    def __repr__(self) -> str:
        return f"<tether.Permit{self._chan.tag} {'used' if self._used else 'held'}>"

    @enable_ki_protection
    def send(self, value: T) -> None:
        """Send ``value`` into the held slot, or straight to a waiting receiver; not a
        checkpoint, never waits.

        Raises:
            SendError: the receiver closed meanwhile; the value is in ``.value``.
            TypeError: ``value`` is not an instance of the channel's element type (the permit
                is still held).
            RuntimeError: this permit was already used or closed.
        """
        chan = self._chan
        if self._used:
            raise RuntimeError("this permit was already used or closed")
        if chan.types is not None and not isinstance(value, chan.types):
            raise wrong_type(value, chan.types)
        self._used = True
        chan.reserved -= 1
        if chan.rx_closed:
            raise SendError(value, reason=chan.rx_reason)
        if chan.recv_tasks:
            task, _ = chan.recv_tasks.popitem(last=False)
            chan.wake(task, Value(value))
        else:
            buffer = chan.buffer
            buffer.append(value)
            if len(buffer) > chan.peak:
                chan.peak = len(buffer)
        if not chan.live:
            _ended_if_last(chan)

    @enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Give the slot back unused (a parked sender takes it); idempotent. ``reason`` is
        accepted as on every handle; a permit keeps none."""
        if not self._used:
            self._used = True
            _give_back(self._chan)

    def __del__(self) -> None:
        chan = getattr(self, "_chan", None)
        if chan is not None and not getattr(self, "_used", True):
            self._used = True
            chan.call_soon(_give_back, chan)


def new_permit(chan: _Chan[T]) -> Permit[T]:
    """A permit for a slot already counted in ``chan.reserved`` (faster than the metaclass's
    ``_create``: this is on every ``reserve()``)."""
    permit: Permit[T] = object.__new__(Permit)
    permit._chan = chan
    permit._used = False
    return permit


def _give_back(chan: _Chan[Any]) -> None:
    """A permit's slot goes back unused: to the next parked sender, if any."""
    chan.reserved -= 1
    if chan.send_tasks and not chan.rx_closed:
        chan.admit()
    _ended_if_last(chan)


def _ended_if_last(chan: _Chan[Any]) -> None:
    """Every sender is gone and this was the last permit: receivers waiting on an empty buffer
    will get nothing more."""
    if not chan.live and not chan.reserved and not chan.buffer:
        chan.wake_all(chan.recv_tasks, chan.closed_error)
