"""tether's pytest plugin and fakes: trio deadlock tests that fail in seconds with the culprit
named, a hard timeout, a process-leak guard, ``FakeAgentd``, ``FakeModel`` (an
OpenAI-compatible server) and ``agent_script``.

Imports pytest: it is for test suites (``pip install tether[test]``), never imported by the
rest of tether. Its names are imported on first use, so the plugin (``tether.testing._plugin``,
registered by every install) costs pytest's start-up almost nothing until it is turned on.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..harness.openai._fake import FakeModel as FakeModel
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
    "FakeModel",
    "Leak",
    "LeakGuard",
    "TimedOut",
    "agent_script",
]

_MODULE = {
    "Deadlock": "_deadlock",
    "DeadlockDetector": "_deadlock",
    "TimedOut": "_deadlock",
    "FakeAgentd": "_fakes",
    "agent_script": "_fakes",
    "FakeModel": "..harness.openai._fake",
    "Leak": "_leaks",
    "LeakGuard": "_leaks",
}


def __getattr__(name: str) -> object:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module if module.startswith(".") else f".{module}",
                                            __name__), name)  # fmt: skip
    value.__module__ = __name__  # as ``reexport`` names it: tether.testing.Name
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
