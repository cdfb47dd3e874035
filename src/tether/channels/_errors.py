"""The errors of tether.channels: the other side is gone, and what was not delivered.

``ChannelClosed`` is the one name a tether user catches; each error raised is also the error
trio code and anyio code expect in its place (``trio.EndOfChannel`` and ``anyio.EndOfStream``,
``ClosedResourceError``, ``BrokenResourceError``, ``WouldBlock``), so a library written against
trio's channels or anyio's memory streams handles it, on either loop.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio
import trio

T = TypeVar("T")


class ChannelClosed(Exception):
    """The other side of the channel is gone.

    Raised by ``recv`` once every strong sender is dropped and the buffer is drained, and by
    ``changed`` / ``await oneshot_rx`` when their senders went away without a new value.
    """

    def __init__(self, message: str = "", *, reason: str | None = None) -> None:
        super().__init__(f"{message}: {reason}" if reason else message)
        self.reason = reason
        """Why the other side closed, when it said (``close(reason=...)``): ``None`` if not."""


class ChannelEnded(ChannelClosed, trio.EndOfChannel, anyio.EndOfStream):
    """Receiving found every sender gone and nothing buffered (trio's ``EndOfChannel``,
    anyio's ``EndOfStream``)."""


class ReceiverClosed(ChannelClosed, trio.ClosedResourceError, anyio.ClosedResourceError):
    """Receiving on a receiver its owner closed, with nothing buffered (``ClosedResourceError``:
    the handle was closed by whoever holds it)."""


class SendError(ChannelClosed, trio.BrokenResourceError, anyio.BrokenResourceError, Generic[T]):
    """A send found the receiver gone (``BrokenResourceError``); the value that was not
    delivered is in ``value``."""

    def __init__(self, value: T, *, reason: str | None = None) -> None:
        super().__init__("the receiver is closed; the value was not delivered", reason=reason)
        self.value: T = value
        """The value that could not be sent, handed back."""


class WouldBlock(trio.WouldBlock, anyio.WouldBlock):
    """A ``try_send`` or ``try_recv`` found no room or nothing ready (``WouldBlock``, trio's
    and anyio's)."""
