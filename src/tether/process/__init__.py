"""Child processes and whole trees: spawn, escalate, reap, twins. Nothing survives its owner."""

from .._backend import ExitedInAnotherTask as ExitedInAnotherTask
from .._backend import UnsupportedBackend as UnsupportedBackend
from .._fdstream import FdStream as FdStream
from .._util import reexport
from ._activity import ToolActivity as ToolActivity
from ._child import Child as Child
from ._group import ChildGroup as ChildGroup
from ._holders import PipeHolder as PipeHolder
from ._keeper import KeeperUnresponsive as KeeperUnresponsive
from ._proc import become_subreaper as become_subreaper
from ._proc import boot_id as boot_id
from ._ref import ProcessRef as ProcessRef
from ._result import DEFAULT_STALL_AFTER as DEFAULT_STALL_AFTER
from ._result import OnStall as OnStall
from ._result import RunResult as RunResult
from ._result import ToolFailed as ToolFailed
from ._result import ToolStall as ToolStall
from ._spawn import SpawnError as SpawnError
from ._start import reap as reap
from ._start import reap_orphans as reap_orphans
from ._start import start as start
from ._start import stop_tree as stop_tree
from ._start import stop_trees as stop_trees
from ._teardown import wait_gone as wait_gone
from ._twins import find_twins as find_twins

__all__ = [
    "Child",
    "ChildGroup",
    "DEFAULT_STALL_AFTER",
    "ExitedInAnotherTask",
    "FdStream",
    "UnsupportedBackend",
    "KeeperUnresponsive",
    "OnStall",
    "PipeHolder",
    "ProcessRef",
    "RunResult",
    "SpawnError",
    "ToolActivity",
    "ToolFailed",
    "ToolStall",
    "become_subreaper",
    "boot_id",
    "find_twins",
    "reap",
    "reap_orphans",
    "start",
    "stop_tree",
    "stop_trees",
    "wait_gone",
]

reexport(globals())
