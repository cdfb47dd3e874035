"""Stream liveness: a clock per turn that stops while the host sleeps and while a tool runs,
thresholds per route and phase from a ledger of healthy turns, verdicts, and salvage."""

from .._clock import Clock as Clock
from .._clock import HostClock as HostClock
from .._clock import ManualClock as ManualClock
from .._util import reexport
from ._ledger import Ledger as Ledger
from ._salvage import Salvage as Salvage
from ._salvage import SalvagedFile as SalvagedFile
from ._salvage import salvage as salvage
from ._stream import StreamClock as StreamClock
from ._stream import TurnStats as TurnStats
from ._thresholds import Threshold as Threshold
from ._thresholds import Thresholds as Thresholds
from ._verdict import ALIVE as ALIVE
from ._verdict import Alive as Alive
from ._verdict import Stale as Stale
from ._verdict import verdict as verdict
from ._verdict import watch_turn as watch_turn

__all__ = [
    "ALIVE",
    "Alive",
    "Clock",
    "HostClock",
    "Ledger",
    "ManualClock",
    "Salvage",
    "SalvagedFile",
    "Stale",
    "StreamClock",
    "Threshold",
    "Thresholds",
    "TurnStats",
    "salvage",
    "verdict",
    "watch_turn",
]

reexport(globals())
