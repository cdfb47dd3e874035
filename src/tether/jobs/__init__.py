"""The job controller: status-based continuation, settled interrupts, a cancel that finishes,
and a planner woken at least once for every stop."""

from .._util import reexport
from ._controller import JobController as JobController
from ._controller import SettleTimeout as SettleTimeout
from ._fake import FakeBackend as FakeBackend
from ._model import BackendUnreachable as BackendUnreachable
from ._model import Job as Job
from ._model import Planner as Planner
from ._model import Step as Step
from ._model import TurnBackend as TurnBackend
from ._model import TurnState as TurnState
from ._store import JobStore as JobStore
from ._store import Wake as Wake

__all__ = [
    "BackendUnreachable",
    "FakeBackend",
    "Job",
    "JobController",
    "JobStore",
    "Planner",
    "SettleTimeout",
    "Step",
    "TurnBackend",
    "TurnState",
    "Wake",
]

reexport(globals())
