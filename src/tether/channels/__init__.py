"""Typed mpsc, oneshot and watch channels whose senders are reference-counted.

Dropping the last strong sender closes the channel, so a receiver loop ends instead of waiting
forever, and ``holders()`` says who keeps a channel open when it does not.
"""

from .._util import reexport
from ._broadcast import BroadcastReceiver as BroadcastReceiver
from ._broadcast import BroadcastSender as BroadcastSender
from ._broadcast import Lagged as Lagged
from ._broadcast import broadcast as broadcast
from ._errors import ChannelClosed as ChannelClosed
from ._errors import ChannelEnded as ChannelEnded
from ._errors import ReceiverClosed as ReceiverClosed
from ._errors import SendError as SendError
from ._errors import WouldBlock as WouldBlock
from ._handles import Holder as Holder
from ._mpsc import ChannelStatistics as ChannelStatistics
from ._mpsc import Receiver as Receiver
from ._mpsc import Sender as Sender
from ._mpsc import WeakSender as WeakSender
from ._mpsc import channel as channel
from ._oneshot import OneshotReceiver as OneshotReceiver
from ._oneshot import OneshotSender as OneshotSender
from ._oneshot import oneshot as oneshot
from ._permit import Permit as Permit
from ._watch import WatchReceiver as WatchReceiver
from ._watch import WatchSender as WatchSender
from ._watch import watch as watch

__all__ = [
    "BroadcastReceiver",
    "BroadcastSender",
    "Lagged",
    "broadcast",
    "ChannelClosed",
    "ChannelEnded",
    "ChannelStatistics",
    "Holder",
    "OneshotReceiver",
    "OneshotSender",
    "Permit",
    "Receiver",
    "ReceiverClosed",
    "SendError",
    "Sender",
    "WatchReceiver",
    "WatchSender",
    "WeakSender",
    "WouldBlock",
    "channel",
    "oneshot",
    "watch",
]

reexport(globals())
