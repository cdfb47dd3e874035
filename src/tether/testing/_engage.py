"""Where the plugin starts watching trio: every run a test starts, however it starts it, and a
coroutine test that runs inside a run already going.

trio starts every run, ``trio.run`` and guest runs alike, through ``setup_runner`` in
``trio._core._run``, and ends it in ``Runner.close``: ``trio.testing.trio_test``, pytest-trio,
qtrio and a sync test calling ``trio.run`` (under any name it was imported as) all do. While a
test runs, the plugin wraps both, so each new runner gets a detector attached before it starts
and detached as it closes (no instrument, which a test inspecting its run could notice).
anyio's trio backend starts one guest run that outlives the test; a coroutine test there is
watched from inside by ``watched``, which does nothing if its run is already watched or is not
trio's.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:  # the detector is imported by the first run it watches, not by the plugin
    from ._deadlock import DeadlockDetector

Make = Callable[[], "DeadlockDetector"]
_RUN: Any = sys.modules["trio._core._run"]
"""trio's run module, where every run starts and ends (the detector reads its runner too)."""


@contextlib.contextmanager
def watching_runs(make: Make) -> Iterator[None]:
    """Attach ``make()`` to every trio run started meanwhile, in any thread."""
    original, original_close = _RUN.setup_runner, _RUN.Runner.close
    attached: dict[int, DeadlockDetector] = {}

    @functools.wraps(original)
    def setup_runner(*args: Any, **kwargs: Any) -> Any:
        runner = original(*args, **kwargs)
        detector = make()
        detector.attach(runner)
        attached[id(runner)] = detector
        return runner

    @functools.wraps(original_close)
    def close(runner: Any) -> None:
        try:
            original_close(runner)
        finally:
            detector = attached.pop(id(runner), None)
            if detector is not None:
                detector.finish()

    _RUN.setup_runner, _RUN.Runner.close = setup_runner, close
    try:
        yield
    finally:
        _RUN.setup_runner, _RUN.Runner.close = original, original_close


def watched(
    test: Callable[..., Coroutine[Any, Any, object]], make: Make
) -> Callable[..., Coroutine[Any, Any, object]]:
    """The coroutine test, watched from inside if it runs in a trio run nobody watches yet: a
    deadlock or the timeout cancels it and fails it."""

    @functools.wraps(test)
    async def watched(*args: Any, **kwargs: Any) -> object:
        __tracebackhide__ = True
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:  # another event loop (anyio's asyncio backend)
            return await test(*args, **kwargs)
        from ._deadlock import WATCHED

        runner = getattr(_RUN.GLOBAL_RUN_CONTEXT, "runner", None)
        # A guest run's attached detector steps aside at its first tick (the run outlives
        # the test), which may come after this: watch from inside all the same.
        if id(runner) in WATCHED and not getattr(runner, "is_guest", False):
            return await test(*args, **kwargs)
        detector = make()
        with trio.CancelScope() as scope:
            detector.start(scope.cancel)
            try:
                return await test(*args, **kwargs)
            finally:
                detector.stop()
        if detector.failure is not None:
            raise detector.failure
        raise RuntimeError("the test was cancelled by the deadlock detector without a reason")

    return watched
