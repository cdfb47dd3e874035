"""Typed messages in length-prefixed JSON frames over Unix stream sockets."""

from .._lazy import lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._codec import MAX_DEPTH as MAX_DEPTH
    from ._codec import MAX_FRAME as MAX_FRAME
    from ._codec import MAX_INT as MAX_INT
    from ._codec import FrameTooLarge as FrameTooLarge
    from ._codec import ProtocolError as ProtocolError
    from ._codec import decode as decode
    from ._codec import encode as encode
    from ._connection import Connection as Connection
    from ._connection import Peer as Peer
    from ._messages import Bye as Bye
    from ._messages import Control as Control
    from ._messages import Error as Error
    from ._messages import Hello as Hello
    from ._messages import Inspect as Inspect
    from ._messages import Inspection as Inspection
    from ._messages import Message as Message
    from ._messages import Nudge as Nudge
    from ._messages import Ping as Ping
    from ._messages import Pong as Pong
    from ._messages import Prompt as Prompt
    from ._messages import Recorded as Recorded
    from ._messages import Reply as Reply
    from ._messages import Superseded as Superseded
    from ._messages import TurnEnded as TurnEnded
    from ._messages import Welcome as Welcome
    from ._unix import ServerBusy as ServerBusy
    from ._unix import UnsafeSocketPath as UnsafeSocketPath
    from ._unix import connect as connect
    from ._unix import serve as serve

__all__ = [
    "MAX_DEPTH",
    "MAX_FRAME",
    "MAX_INT",
    "Bye",
    "Connection",
    "Control",
    "Error",
    "FrameTooLarge",
    "Hello",
    "Inspect",
    "Inspection",
    "Message",
    "Nudge",
    "Peer",
    "Ping",
    "Pong",
    "Recorded",
    "Prompt",
    "ProtocolError",
    "Reply",
    "ServerBusy",
    "Superseded",
    "TurnEnded",
    "UnsafeSocketPath",
    "Welcome",
    "connect",
    "decode",
    "encode",
    "serve",
]

_WHERE = {
    "MAX_DEPTH": "._codec",
    "MAX_FRAME": "._codec",
    "MAX_INT": "._codec",
    "FrameTooLarge": "._codec",
    "ProtocolError": "._codec",
    "decode": "._codec",
    "encode": "._codec",
    "Connection": "._connection",
    "Peer": "._connection",
    "Bye": "._messages",
    "Control": "._messages",
    "Error": "._messages",
    "Hello": "._messages",
    "Inspect": "._messages",
    "Inspection": "._messages",
    "Message": "._messages",
    "Nudge": "._messages",
    "Ping": "._messages",
    "Pong": "._messages",
    "Recorded": "._messages",
    "TurnEnded": "._messages",
    "Prompt": "._messages",
    "Reply": "._messages",
    "Superseded": "._messages",
    "Welcome": "._messages",
    "ServerBusy": "._unix",
    "UnsafeSocketPath": "._unix",
    "connect": "._unix",
    "serve": "._unix",
}
"""Where each public name lives: each is imported on first use (``tether._lazy``)."""
_get, __dir__ = lazy(globals(), _WHERE)


def __getattr__(name: str) -> object:
    return _get(name)
