"""The two errors of tether.channels: the other side is gone, and what was not delivered."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class ChannelClosed(Exception):
    """The other side of the channel is gone.

    Raised by ``recv`` once every strong sender is dropped and the buffer is drained, and by
    ``changed`` / ``await oneshot_rx`` when their senders went away without a new value.
    """


class SendError(ChannelClosed, Generic[T]):
    """A send found the receiver gone; the value that was not delivered is in ``value``."""

    def __init__(self, value: T) -> None:
        super().__init__("the receiver is closed; the value was not delivered")
        self.value: T = value
        """The value that could not be sent, handed back."""
