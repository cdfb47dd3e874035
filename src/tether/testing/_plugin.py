"""The pytest plugin (entry point ``pytest11``): deadlock detection and a hard timeout for trio
tests, and the process-leak guard for any test.

ini options: ``tether_deadlock`` (bool: every trio test), ``tether_deadlock_cushion`` (seconds,
1.0), ``tether_timeout`` (seconds per trio test, 0: none), ``tether_process_leaks`` (bool:
every test). Markers: ``deadlock_check`` (this trio test), ``no_deadlock_check`` (not this one).
Fixtures: ``deadlock_detector`` (turns detection on for the test and gives the detector),
``no_process_leaks``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported when a test needs them: the plugin loads with every pytest run
    from ._deadlock import DeadlockDetector

_FIXTURE = "deadlock_detector"
_WARNED: list[bool] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "tether_deadlock", "detect deadlocks in every trio test", type="bool", default=False
    )
    parser.addini(
        "tether_deadlock_cushion", "seconds every task must sleep before a deadlock", default="1.0"
    )
    parser.addini(
        "tether_timeout", "fail a trio test running longer (seconds; 0: never)", default="0"
    )
    parser.addini(
        "tether_process_leaks", "fail any test that leaves a process", type="bool", default=False
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deadlock_check: detect deadlocks in this trio test")
    config.addinivalue_line("markers", "no_deadlock_check: never detect deadlocks in this test")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getini("tether_process_leaks"):
        for item in items:
            if "no_process_leaks" not in getattr(item, "fixturenames", ["no_process_leaks"]):
                item.fixturenames.append("no_process_leaks")  # type: ignore[attr-defined]


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
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    function = getattr(item, "obj", None)
    if isinstance(item, pytest.Function) and item.get_closest_marker("trio") is not None:
        detector = _detector_for(item)
        if detector is not None:
            hypothesis = getattr(function, "hypothesis", None)
            if hypothesis is not None:
                hypothesis.inner_test = _watched(hypothesis.inner_test, detector)
            elif inspect.iscoroutinefunction(function):
                item.obj = _watched(function, detector)
    yield


def _detector_for(item: pytest.Function) -> DeadlockDetector | None:
    config = item.config
    if item.get_closest_marker("no_deadlock_check") is not None:
        deadlock = False
    else:
        deadlock = (
            bool(config.getini("tether_deadlock"))
            or item.get_closest_marker("deadlock_check") is not None
            or _FIXTURE in item.fixturenames
        )
    timeout = _timeout(config)
    if not deadlock and timeout is None:
        return None
    from ._deadlock import KNOWS_TRIO, DeadlockDetector

    if deadlock and not KNOWS_TRIO:
        deadlock = False
        if not _WARNED:
            import importlib.metadata

            _WARNED.append(True)
            warnings.warn(
                "tether's deadlock detector does not know this trio's layout"
                f" (trio {importlib.metadata.version('trio')}): deadlock detection is off",
                RuntimeWarning,
                stacklevel=1,
            )
        if timeout is None:
            return None
    if _FIXTURE in item.fixturenames and _FIXTURE in item.funcargs:
        detector = item.funcargs[_FIXTURE]
        assert isinstance(detector, DeadlockDetector)
    else:
        detector = DeadlockDetector(_cushion(config), timeout)
    detector.deadlocks = deadlock
    return detector


def _cushion(config: pytest.Config) -> float:
    return float(config.getini("tether_deadlock_cushion"))


def _timeout(config: pytest.Config) -> float | None:
    seconds = float(config.getini("tether_timeout"))
    return seconds if seconds > 0 else None


def _watched(
    test: Callable[..., Coroutine[Any, Any, object]], detector: DeadlockDetector
) -> Callable[..., Coroutine[Any, Any, object]]:
    """The test, run under the detector: a deadlock or the timeout cancels it and fails it."""

    import trio

    @functools.wraps(test)
    async def watched(*args: Any, **kwargs: Any) -> object:
        __tracebackhide__ = True
        fresh = detector.fresh()  # Hypothesis runs the test many times: one detector each run
        with trio.CancelScope() as scope:
            fresh.start(scope.cancel)
            try:
                return await test(*args, **kwargs)
            finally:
                fresh.stop()
        if fresh.failure is not None:
            raise fresh.failure
        raise RuntimeError("the test was cancelled by the deadlock detector without a reason")

    return watched
