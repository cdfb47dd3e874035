"""tether's pytest plugin and fakes: trio deadlock tests that fail in seconds with the culprit
named, a hard timeout, a process-leak guard, ``FakeAgentd`` and ``agent_script``.

Imports pytest: it is for test suites (``pip install tether[test]``), never imported by the
rest of tether.
"""

from .._util import reexport
from ._deadlock import Deadlock as Deadlock
from ._deadlock import DeadlockDetector as DeadlockDetector
from ._deadlock import TimedOut as TimedOut
from ._fakes import FakeAgentd as FakeAgentd
from ._fakes import agent_script as agent_script
from ._leaks import Leak as Leak
from ._leaks import LeakGuard as LeakGuard

__all__ = [
    "Deadlock",
    "DeadlockDetector",
    "FakeAgentd",
    "Leak",
    "LeakGuard",
    "TimedOut",
    "agent_script",
]

reexport(globals())
