"""The harness runtime: one nursery owns engine, connection loop and child agents."""

from .._util import reexport

# What an engine receives, here beside the engine's other names (their home is tether.wire).
from ..wire import Nudge as Nudge
from ..wire import Prompt as Prompt
from ._context import Command as Command
from ._context import Engine as Engine
from ._context import HarnessContext as HarnessContext
from ._runtime import run_harness as run_harness
from ._supervisor import EXIT_DAEMON_GONE as EXIT_DAEMON_GONE
from ._supervisor import EXIT_ENGINE_FAILED as EXIT_ENGINE_FAILED
from ._supervisor import EXIT_OK as EXIT_OK
from ._supervisor import EXIT_SUPERSEDED as EXIT_SUPERSEDED
from ._supervisor import EXIT_TRANSCRIPT_FAILED as EXIT_TRANSCRIPT_FAILED

__all__ = [
    "EXIT_DAEMON_GONE",
    "EXIT_ENGINE_FAILED",
    "EXIT_OK",
    "EXIT_SUPERSEDED",
    "EXIT_TRANSCRIPT_FAILED",
    "Command",
    "Engine",
    "HarnessContext",
    "Nudge",
    "Prompt",
    "run_harness",
]

reexport(globals())
