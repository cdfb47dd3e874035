"""Child processes and whole trees: spawn, escalate, reap, twins. Nothing survives its owner."""

from ._child import Child as Child
from ._group import ChildGroup as ChildGroup
from ._ref import ProcessRef as ProcessRef
from ._spawn import SpawnError as SpawnError
from ._twins import find_twins as find_twins

__all__ = ["Child", "ChildGroup", "ProcessRef", "SpawnError", "find_twins"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
