"""tether: keeps agent harness processes and their children honest about being alive.

This module only re-exports the public names of each layer (``docs/architecture.md``); each
lives in its layer, and each layer is imported the first time one of its names is used, so
``import tether`` costs almost nothing and a program pays only for what it touches (``tether
run`` imports no trio; the etcd store's httpx is imported only if it is used).
"""

TYPE_CHECKING = False  # ``typing`` alone would cost ``import tether`` 8 ms

__version__ = "0.1.0.dev0"

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
    "AgentEvent",
    "Agentd",
    "AgentdError",
    "Attached",
    "Backoff",
    "Delivered",
    "DeliveryFailed",
    "PromptTooLarge",
    "Queued",
    "SessionFailed",
    "SessionState",
    "SessionStatus",
    "StallPolicy",
    "StartFailed",
    "TurnUnknown",
    "QueuedPrompt",
    "ChannelClosed",
    "ChannelEnded",
    "ChannelStatistics",
    "Child",
    "ChildGroup",
    "EpochStore",
    "HarnessContext",
    "Nudge",
    "Prompt",
    "Holder",
    "HostIdInUse",
    "JournalError",
    "LeasedEpochStore",
    "OneshotReceiver",
    "OneshotSender",
    "ProcessRef",
    "OnStall",
    "PipeHolder",
    "RunResult",
    "ToolActivity",
    "ToolFailed",
    "ToolStall",
    "Receiver",
    "ReceiverClosed",
    "BroadcastReceiver",
    "BroadcastSender",
    "Lagged",
    "broadcast",
    "Permit",
    "SendError",
    "Sender",
    "OwnedElsewhere",
    "SessionRecord",
    "SignalEvent",
    "SpawnError",
    "KeeperUnresponsive",
    "ExitedInAnotherTask",
    "FdStream",
    "UnsupportedBackend",
    "SqliteEpochStore",
    "StoreInUse",
    "StoreUnavailable",
    "Superseded",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "Unconfirmed",
    "WatchReceiver",
    "WatchSender",
    "WeakSender",
    "WouldBlock",
    "channel",
    "EtcdEpochStore",
    "find_twins",
    "oneshot",
    "run_harness",
    "watch",
]

_LAYER = {
    "AgentEvent": "agentd",
    "Agentd": "agentd",
    "AgentdError": "agentd",
    "Attached": "agentd",
    "Backoff": "agentd",
    "Delivered": "agentd",
    "DeliveryFailed": "agentd",
    "PromptTooLarge": "agentd",
    "Queued": "agentd",
    "SessionFailed": "agentd",
    "SessionState": "agentd",
    "SessionStatus": "agentd",
    "StallPolicy": "agentd",
    "StartFailed": "agentd",
    "TurnUnknown": "agentd",
    "Unconfirmed": "agentd",
    "ChannelClosed": "channels",
    "ChannelEnded": "channels",
    "ReceiverClosed": "channels",
    "BroadcastReceiver": "channels",
    "BroadcastSender": "channels",
    "Lagged": "channels",
    "broadcast": "channels",
    "Permit": "channels",
    "ChannelStatistics": "channels",
    "Holder": "channels",
    "OneshotReceiver": "channels",
    "OneshotSender": "channels",
    "Receiver": "channels",
    "SendError": "channels",
    "Sender": "channels",
    "WatchReceiver": "channels",
    "WatchSender": "channels",
    "WeakSender": "channels",
    "WouldBlock": "channels",
    "channel": "channels",
    "oneshot": "channels",
    "watch": "channels",
    "EpochStore": "epochs",
    "EtcdEpochStore": "epochs",
    "HostIdInUse": "epochs",
    "LeasedEpochStore": "epochs",
    "OwnedElsewhere": "epochs",
    "QueuedPrompt": "epochs",
    "SessionRecord": "epochs",
    "SqliteEpochStore": "epochs",
    "StoreInUse": "epochs",
    "StoreUnavailable": "epochs",
    "Superseded": "epochs",
    "HarnessContext": "harness",
    "Nudge": "harness",
    "Prompt": "harness",
    "run_harness": "harness",
    "BackendUnreachable": "jobs",
    "FakeBackend": "jobs",
    "Job": "jobs",
    "JobController": "jobs",
    "JobStore": "jobs",
    "Planner": "jobs",
    "SettleTimeout": "jobs",
    "Step": "jobs",
    "TurnBackend": "jobs",
    "TurnState": "jobs",
    "Wake": "jobs",
    "JournalError": "journal",
    "ToolCall": "journal",
    "ToolResult": "journal",
    "Transcript": "journal",
    "ALIVE": "liveness",
    "Alive": "liveness",
    "Clock": "liveness",
    "HostClock": "liveness",
    "Ledger": "liveness",
    "ManualClock": "liveness",
    "Salvage": "liveness",
    "SalvagedFile": "liveness",
    "Stale": "liveness",
    "StreamClock": "liveness",
    "Threshold": "liveness",
    "Thresholds": "liveness",
    "TurnStats": "liveness",
    "salvage": "liveness",
    "verdict": "liveness",
    "watch_turn": "liveness",
    "Child": "process",
    "ChildGroup": "process",
    "ProcessRef": "process",
    "OnStall": "process",
    "PipeHolder": "process",
    "RunResult": "process",
    "ToolActivity": "process",
    "ToolFailed": "process",
    "ToolStall": "process",
    "SpawnError": "process",
    "KeeperUnresponsive": "process",
    "ExitedInAnotherTask": "process",
    "FdStream": "process",
    "UnsupportedBackend": "process",
    "find_twins": "process",
    "SignalEvent": "signals",
}
"""Where each public name lives."""
_SUBPACKAGES = frozenset(
    {
        "agentd",
        "channels",
        "cli",
        "epochs",
        "harness",
        "jobs",
        "journal",
        "liveness",
        "mcp",
        "process",
        "signals",
        "testing",
        "wire",
    }
)


def __getattr__(name: str) -> object:
    import importlib  # here: ``tether run`` starts without it

    layer = _LAYER.get(name)
    if layer is not None:
        value = getattr(importlib.import_module(f".{layer}", __name__), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


if TYPE_CHECKING:
    from .agentd import Agentd as Agentd
    from .agentd import AgentdError as AgentdError
    from .agentd import AgentEvent as AgentEvent
    from .agentd import Attached as Attached
    from .agentd import Backoff as Backoff
    from .agentd import Delivered as Delivered
    from .agentd import DeliveryFailed as DeliveryFailed
    from .agentd import PromptTooLarge as PromptTooLarge
    from .agentd import Queued as Queued
    from .agentd import SessionFailed as SessionFailed
    from .agentd import SessionState as SessionState
    from .agentd import SessionStatus as SessionStatus
    from .agentd import StallPolicy as StallPolicy
    from .agentd import StartFailed as StartFailed
    from .agentd import TurnUnknown as TurnUnknown
    from .agentd import Unconfirmed as Unconfirmed
    from .channels import BroadcastReceiver as BroadcastReceiver
    from .channels import BroadcastSender as BroadcastSender
    from .channels import ChannelClosed as ChannelClosed
    from .channels import ChannelEnded as ChannelEnded
    from .channels import ChannelStatistics as ChannelStatistics
    from .channels import Holder as Holder
    from .channels import Lagged as Lagged
    from .channels import OneshotReceiver as OneshotReceiver
    from .channels import OneshotSender as OneshotSender
    from .channels import Permit as Permit
    from .channels import Receiver as Receiver
    from .channels import ReceiverClosed as ReceiverClosed
    from .channels import Sender as Sender
    from .channels import SendError as SendError
    from .channels import WatchReceiver as WatchReceiver
    from .channels import WatchSender as WatchSender
    from .channels import WeakSender as WeakSender
    from .channels import WouldBlock as WouldBlock
    from .channels import broadcast as broadcast
    from .channels import channel as channel
    from .channels import oneshot as oneshot
    from .channels import watch as watch
    from .epochs import EpochStore as EpochStore
    from .epochs import EtcdEpochStore as EtcdEpochStore
    from .epochs import HostIdInUse as HostIdInUse
    from .epochs import LeasedEpochStore as LeasedEpochStore
    from .epochs import OwnedElsewhere as OwnedElsewhere
    from .epochs import QueuedPrompt as QueuedPrompt
    from .epochs import SessionRecord as SessionRecord
    from .epochs import SqliteEpochStore as SqliteEpochStore
    from .epochs import StoreInUse as StoreInUse
    from .epochs import StoreUnavailable as StoreUnavailable
    from .epochs import Superseded as Superseded
    from .harness import HarnessContext as HarnessContext
    from .harness import Nudge as Nudge
    from .harness import Prompt as Prompt
    from .harness import run_harness as run_harness
    from .jobs import BackendUnreachable as BackendUnreachable
    from .jobs import FakeBackend as FakeBackend
    from .jobs import Job as Job
    from .jobs import JobController as JobController
    from .jobs import JobStore as JobStore
    from .jobs import Planner as Planner
    from .jobs import SettleTimeout as SettleTimeout
    from .jobs import Step as Step
    from .jobs import TurnBackend as TurnBackend
    from .jobs import TurnState as TurnState
    from .jobs import Wake as Wake
    from .journal import JournalError as JournalError
    from .journal import ToolCall as ToolCall
    from .journal import ToolResult as ToolResult
    from .journal import Transcript as Transcript
    from .liveness import ALIVE as ALIVE
    from .liveness import Alive as Alive
    from .liveness import Clock as Clock
    from .liveness import HostClock as HostClock
    from .liveness import Ledger as Ledger
    from .liveness import ManualClock as ManualClock
    from .liveness import Salvage as Salvage
    from .liveness import SalvagedFile as SalvagedFile
    from .liveness import Stale as Stale
    from .liveness import StreamClock as StreamClock
    from .liveness import Threshold as Threshold
    from .liveness import Thresholds as Thresholds
    from .liveness import TurnStats as TurnStats
    from .liveness import salvage as salvage
    from .liveness import verdict as verdict
    from .liveness import watch_turn as watch_turn
    from .process import Child as Child
    from .process import ChildGroup as ChildGroup
    from .process import ExitedInAnotherTask as ExitedInAnotherTask
    from .process import FdStream as FdStream
    from .process import KeeperUnresponsive as KeeperUnresponsive
    from .process import OnStall as OnStall
    from .process import PipeHolder as PipeHolder
    from .process import ProcessRef as ProcessRef
    from .process import RunResult as RunResult
    from .process import SpawnError as SpawnError
    from .process import ToolActivity as ToolActivity
    from .process import ToolFailed as ToolFailed
    from .process import ToolStall as ToolStall
    from .process import UnsupportedBackend as UnsupportedBackend
    from .process import find_twins as find_twins
    from .signals import SignalEvent as SignalEvent
