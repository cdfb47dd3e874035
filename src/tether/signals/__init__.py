"""Signals with their sender: pid, uid and command line, logged on receipt."""

from ._event import SignalEvent as SignalEvent
from ._receive import receive as receive

__all__ = ["SignalEvent", "receive"]

SignalEvent.__module__ = __name__
receive.__module__ = __name__
