"""Signals with their sender: pid, uid and command line, logged on receipt."""

from .._util import reexport
from ._event import SignalEvent as SignalEvent
from ._receive import receive as receive

__all__ = ["SignalEvent", "receive"]

reexport(globals())
