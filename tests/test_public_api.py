"""tether re-exports exactly the public names of DESIGN.md that exist so far, and the layers
import only downwards."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import tether
import tether.agentd
import tether.channels
import tether.epochs
import tether.harness
import tether.jobs
import tether.journal
import tether.liveness
import tether.process
import tether.signals
import tether.wire

PUBLIC = {
    "tether.channels": {
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
    },
    "tether.signals": {"SignalEvent"},
    "tether.process": {
        "Child",
        "ChildGroup",
        "OnStall",
        "PipeHolder",
        "ProcessRef",
        "RunResult",
        "SpawnError",
        "KeeperUnresponsive",
        "ExitedInAnotherTask",
        "FdStream",
        "UnsupportedBackend",
        "ToolActivity",
        "ToolFailed",
        "ToolStall",
        "find_twins",
    },
    "tether.epochs": {
        "EpochStore",
        "EtcdEpochStore",
        "LeasedEpochStore",
        "HostIdInUse",
        "OwnedElsewhere",
        "StoreInUse",
        "StoreUnavailable",
        "QueuedPrompt",
        "SessionRecord",
        "SqliteEpochStore",
        "Superseded",
    },
    "tether.journal": {"JournalError", "ToolCall", "ToolResult", "Transcript"},
    "tether.harness": {"HarnessContext", "Nudge", "Prompt", "run_harness"},
    "tether.liveness": {
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
    },
    "tether.jobs": {
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
    },
    "tether.agentd": {
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
        "Unconfirmed",
    },
}
# Lower-level tools that stay in their subpackage: what a supervisor needs, not an engine.
PROCESS_TOOLS = {
    "DEFAULT_STALL_AFTER",
    "become_subreaper",
    "boot_id",
    "reap",
    "reap_orphans",
    "start",
    "stop_tree",
    "stop_trees",
    "wait_gone",
}

# DESIGN.md's layers, bottom first; a module may import only from layers before its own.
LAYERS = [
    "_util",
    "_lazy",
    "_procfs",
    "_clock",
    "_keeper",
    "_backend",
    "_fdstream",
    "_aiopark",
    "_aio",
    "_worker",
    "_batch",
    "_private",
    "_sqlite",
    "channels",
    "signals",
    "process",
    "epochs",
    "journal",
    "wire",
    "liveness",
    "jobs",
    "inspect",
    "harness",
    "agentd",
    "cli",
    "testing",
    "mcp",
]
SRC = Path(tether.__file__).parent


def test_top_level_reexports_every_public_name() -> None:
    assert set(tether.__all__) == set().union(*PUBLIC.values())
    for module_name, names in PUBLIC.items():
        module = __import__(module_name, fromlist=["*"])
        for name in names:
            assert getattr(tether, name) is getattr(module, name)
            home = "tether.wire" if name in ("Prompt", "Nudge") else module_name  # wire's own
            assert getattr(module, name).__module__ == home, name


def test_subpackages_list_what_they_export() -> None:
    assert set(tether.channels.__all__) == PUBLIC["tether.channels"]
    assert set(tether.process.__all__) == PUBLIC["tether.process"] | PROCESS_TOOLS
    assert set(tether.agentd.__all__) == PUBLIC["tether.agentd"] | {"EventKind"}
    assert set(tether.liveness.__all__) == PUBLIC["tether.liveness"]
    assert set(tether.jobs.__all__) == PUBLIC["tether.jobs"]
    assert set(tether.signals.__all__) == PUBLIC["tether.signals"] | {"receive"}
    assert set(tether.epochs.__all__) == PUBLIC["tether.epochs"]
    # The wire's message classes stay in tether.wire: ``tether.Superseded`` is the exception.
    assert set(tether.wire.__all__) >= {"Hello", "Welcome", "Superseded", "ProtocolError", "serve"}
    assert set(tether.wire.__all__) & set(tether.__all__) == {"Superseded", "Prompt", "Nudge"}
    # What an engine receives is a harness name too (issue 43, row 10): no tether.wire import.
    assert tether.Prompt is tether.harness.Prompt is tether.wire.Prompt
    assert tether.Nudge is tether.harness.Nudge is tether.wire.Nudge
    assert tether.Superseded is tether.epochs.Superseded is not tether.wire.Superseded
    assert set(tether.journal.__all__) == PUBLIC["tether.journal"] | {
        "MAX_DEPTH",
        "Damage",
        "Scan",
        "Entry",
        "Event",
        "Message",
        "Repair",
        "scan",
    }


def test_lower_layers_never_import_upper_ones() -> None:
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC)
        layer = relative.parts[0].removesuffix(".py")
        if layer == "__init__" or layer == "__main__":
            continue
        rank = LAYERS.index(layer)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                base = relative.parts[: len(relative.parts) - node.level]
                target = (*base, *(node.module or "").split("."))
                imported = target[0] if target and target[0] else (node.module or "")
                if imported == layer or not imported:
                    continue
                assert LAYERS.index(imported) < rank, f"{relative} imports upper layer {imported}"
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = (
                    [node.module]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                )
                for name in names:
                    if name and name.startswith("tether."):
                        upper = name.split(".")[1]
                        assert LAYERS.index(upper) <= rank, f"{relative} imports {name}"


def test_errors_are_one_family() -> None:
    assert issubclass(tether.SendError, tether.ChannelClosed)
    assert issubclass(tether.SpawnError, OSError)


def test_the_package_is_typed() -> None:
    assert files("tether").joinpath("py.typed").is_file()


def test_the_testing_plugin_stays_out_of_the_core() -> None:
    import subprocess
    import sys

    import tether.testing

    assert set(tether.testing.__all__) == {
        "Deadlock",
        "DeadlockDetector",
        "FakeAgentd",
        "FakeModel",
        "Leak",
        "LeakGuard",
        "TimedOut",
        "agent_script",
    }
    check = "import sys, tether, tether.cli; assert 'pytest' not in sys.modules, 'pytest imported'"
    subprocess.run([sys.executable, "-c", check], check=True)


def test_the_core_never_imports_the_etcd_extra() -> None:
    code = (
        "import sys, tether, tether.agentd, tether.cli, tether.testing;"
        " assert 'httpx' not in sys.modules and 'tether.epochs._etcd' not in sys.modules;"
        " tether.EtcdEpochStore; assert 'httpx' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
