"""The pytest plugin (entry point ``pytest11``): deadlock detection and a hard timeout for every
trio run a test starts, deadlock detection for every asyncio loop it runs (``_aioloop``), and
the process-leak guard for any test.

ini options: ``tether_deadlock`` (bool: every trio run), ``tether_deadlock_cushion`` (seconds,
1.0), ``tether_timeout`` (seconds per trio run, 300; 0: none), ``tether_process_leaks`` (bool:
every test). Markers: ``deadlock_check`` (this test), ``no_deadlock_check`` (not this one).
Fixtures: ``deadlock_detector`` (turns detection on for the test and gives the detector),
``no_process_leaks``. Where it hooks into trio is ``_engage``'s business.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported when a test needs them: the plugin loads with every pytest run
    from ._deadlock import DeadlockDetector

    Make = Callable[[], DeadlockDetector]

_FIXTURE = "deadlock_detector"
_WARNED: set[str] = set()
_COUNTS = {"tests": 0, "runs": 0}
"""How many tests had a trio run watched, and how many runs: the terminal summary says."""
_TERMINAL: list[int] = []
"""stderr as it was before pytest captured it (see ``pytest_load_initial_conftests``)."""
_SETTINGS = pytest.StashKey[tuple[bool, "float | None"]]()
"""Per test: whether to look for deadlocks, and the timeout."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "tether_deadlock", "detect deadlocks in every trio run", type="bool", default=False
    )
    parser.addini(
        "tether_deadlock_cushion", "seconds every task must sleep before a deadlock", default="1.0"
    )
    parser.addini(
        "tether_timeout",
        "fail a trio run of a test lasting longer (seconds; 0: never)",
        default="300",
    )
    parser.addini(
        "tether_process_leaks", "fail any test that leaves a process", type="bool", default=False
    )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests() -> Iterator[None]:
    """Keep a copy of stderr from before pytest captures it: a run that cannot end (a task
    waiting for a thread trio cannot cancel) says its failure there, since pytest never will."""
    with contextlib.suppress(OSError):
        _TERMINAL.append(os.dup(2))
    yield


def pytest_unconfigure() -> None:
    while _TERMINAL:
        os.close(_TERMINAL.pop())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deadlock_check: detect deadlocks in this trio test")
    config.addinivalue_line("markers", "no_deadlock_check: never detect deadlocks in this test")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getini("tether_process_leaks"):
        for item in items:
            if "no_process_leaks" not in getattr(item, "fixturenames", ["no_process_leaks"]):
                item.fixturenames.append("no_process_leaks")  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _COUNTS["runs"] and config.getini("tether_deadlock"):
        terminalreporter.write_line(
            f"tether: {_COUNTS['runs']} trio runs of {_COUNTS['tests']} tests were watched for"
            " deadlocks"
        )


@pytest.fixture
def deadlock_detector(request: pytest.FixtureRequest) -> DeadlockDetector:
    """Detect deadlocks in this trio test (whatever the ini says); the detector, whose
    ``cushion`` the test may change before its first checkpoint."""
    from ._deadlock import DeadlockDetector

    return DeadlockDetector(_cushion(request.config), _timeout(request.config))


@pytest.fixture
def no_process_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if a process it started, directly or deeper, is alive or a zombie after
    it; each is named, killed and reaped, so the next test starts clean."""
    from ._leaks import LeakGuard

    guard = LeakGuard()
    guard.before()
    yield
    leaks = guard.after()
    if leaks:
        pytest.fail(
            f"{request.node.nodeid} left {len(leaks)} processes behind (killed and reaped):\n"
            + "\n".join(f"  {leak.describe()}" for leak in leaks),
            pytrace=False,
        )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _watching(item):
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    make = _maker(item)
    function = getattr(item, "obj", None)
    if make is not None and isinstance(item, pytest.Function):
        from ._engage import watched

        hypothesis = getattr(function, "hypothesis", None)
        if hypothesis is not None and inspect.iscoroutinefunction(hypothesis.inner_test):
            hypothesis.inner_test = watched(hypothesis.inner_test, make)
        elif inspect.iscoroutinefunction(function):
            item.obj = watched(function, make)
    with _watching(item, make):
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _watching(item):
        yield


@contextlib.contextmanager
def _watching(item: pytest.Item, make: Make | None = None) -> Iterator[None]:
    """Every trio run the test starts meanwhile is watched, and every asyncio loop it runs."""
    make = make or _maker(item)
    with contextlib.ExitStack() as stack:
        if make is not None:
            from ._engage import watching_runs

            stack.enter_context(watching_runs(make))
        if "asyncio" in sys.modules and sys.implementation.name == "cpython":
            settings = item.stash.get(_SETTINGS, None)
            if settings is None:
                settings = item.stash[_SETTINGS] = _settings(item)
            if settings[0]:
                from ._aioloop import watching_loops

                stack.enter_context(watching_loops(_cushion(item.config)))
        yield


def _maker(item: pytest.Item) -> Make | None:
    """What makes the detector of each trio run of this test, or ``None`` if nothing is on.

    Nothing is on before trio is imported (a project that never imports it pays nothing),
    unless the test is to run on anyio's trio backend, which imports trio only once its runner
    starts, inside the test's call.
    """
    if "trio" not in sys.modules:
        if not _on_anyio_trio(item):
            return None
        import trio  # noqa: F401 - now, so its runs are watched from the first
    settings = item.stash.get(_SETTINGS, None)
    if settings is None:
        settings = item.stash[_SETTINGS] = _settings(item)
    deadlock, timeout = settings
    if not deadlock and timeout is None:
        return None
    used: list[DeadlockDetector] = []

    def make() -> DeadlockDetector:
        # The fixture's detector watches the first run, so the test's settings take effect;
        # Hypothesis runs the test many times: one fresh detector each. Imported here, by a
        # run's start: a test that starts no trio run pays nothing for it.
        from ._deadlock import DeadlockDetector

        _COUNTS["runs"] += 1
        if used:
            return used[0].fresh()
        _COUNTS["tests"] += 1
        template = getattr(item, "funcargs", {}).get(_FIXTURE)
        if not isinstance(template, DeadlockDetector):
            template = DeadlockDetector(_cushion(item.config), timeout)
        template.deadlocks = deadlock
        template.terminal = _TERMINAL[-1] if _TERMINAL else None
        used.append(template)
        return template

    return make


def _on_anyio_trio(item: pytest.Item) -> bool:
    """Whether anyio's plugin runs this test on its trio backend (``anyio_backend`` is
    ``"trio"`` or ``("trio", options)``)."""
    backend = getattr(item, "funcargs", {}).get("anyio_backend")
    name = backend[0] if isinstance(backend, tuple) and backend else backend
    return name == "trio"


def _settings(item: pytest.Item) -> tuple[bool, float | None]:
    """Whether to look for deadlocks in this test, and its timeout."""
    config = item.config
    if item.get_closest_marker("no_deadlock_check") is not None:
        deadlock = False
    else:
        deadlock = (
            bool(config.getini("tether_deadlock"))
            or item.get_closest_marker("deadlock_check") is not None
            or _FIXTURE in getattr(item, "fixturenames", ())
        )
    if deadlock:
        from ._deadlock import KNOWS_TRIO

        if not KNOWS_TRIO:
            import importlib.metadata

            deadlock = False
            _warn_once(
                "tether's deadlock detector does not know this trio's layout"
                f" (trio {importlib.metadata.version('trio')}): deadlock detection is off"
            )
        elif sys.implementation.name != "cpython":
            deadlock = False
            _warn_once(
                f"on {sys.implementation.name}, tether's deadlock detector cannot follow"
                " references as it does on CPython: deadlock detection is off"
            )
    return deadlock, _timeout(config)


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)


def _cushion(config: pytest.Config) -> float:
    return float(config.getini("tether_deadlock_cushion"))


def _timeout(config: pytest.Config) -> float | None:
    seconds = float(config.getini("tether_timeout"))
    return seconds if seconds > 0 else None
