"""The harness runtime: one nursery owns engine, connection loop and child agents."""

from .._util import reexport
from ._context import Command as Command
from ._context import HarnessContext as HarnessContext
from ._runtime import EXIT_DAEMON_GONE as EXIT_DAEMON_GONE
from ._runtime import EXIT_ENGINE_FAILED as EXIT_ENGINE_FAILED
from ._runtime import EXIT_OK as EXIT_OK
from ._runtime import EXIT_SUPERSEDED as EXIT_SUPERSEDED
from ._runtime import Engine as Engine
from ._runtime import run_harness as run_harness

__all__ = [
    "EXIT_DAEMON_GONE",
    "EXIT_ENGINE_FAILED",
    "EXIT_OK",
    "EXIT_SUPERSEDED",
    "Command",
    "Engine",
    "HarnessContext",
    "run_harness",
]

reexport(globals())
