"""``DeadlockDetector``: a trio run in which some tasks wait on each other, or on things nothing
that runs can reach, fails in about a cushion with each task's line and who holds what it waits
on; a hard timeout says why no deadlock was declared.

Go's runtime says "all goroutines are asleep - deadlock!" and its leak profile finds goroutines
blocked on what nothing can reach; trio cannot in general (trio issues 182 and 1085). A test
can. The detector is an instrument and a watchdog thread. Every quarter cushion the thread marks
a check due and, if the run loop sits in a wait that an early wake-up cannot disturb (not a
``wait_all_tasks_blocked`` cushion, not an autojump), wakes it with ``run_sync_soon``. The check
runs in ``after_io_wait``, inside the run: tasks whose await frames have not moved for a whole
cushion are handed to ``analyse`` (``_verdict``), which decides by reachability which of them
nothing could ever wake, even while other tasks run, sleep or wait on sockets. The check costs
at most a twentieth of the time between checks. The hard timeout is the same thread, never a
trio deadline (a deadline would make every deadlocked run look alive).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from ._report import deadlock_report, timeout_report
from ._verdict import analyse
from ._waits import await_chain, classify, frame_of

_TRIO = os.path.dirname(trio.__file__)
_RUN: Any = sys.modules["trio._core._run"]
KNOWS_TRIO = hasattr(_RUN, "setup_runner") and all(
    os.path.exists(os.path.join(_TRIO, *path))
    for path in (("_threads.py",), ("_signals.py",), ("_core", "_run.py"))
)
"""Whether trio is laid out as the detector expects (trio 0.25 to 0.35 at least): where it
starts a run and where its thread and signal waits live. Without it the plugin turns deadlock
detection off and says so (the hard timeout still works)."""

WATCHED: set[int] = set()
"""ids of the TrioTokens of the runs a detector watches now (one detector per run)."""
_THREADS: set[int] = set()


class Deadlock(Exception):
    """Tasks of the run wait on each other or on what nothing can reach; the message is the
    report."""


class TimedOut(Exception):
    """The test ran longer than its hard timeout; the message says why no deadlock was declared
    and holds every task's line."""


def _nothing() -> None:
    """What the watchdog hands the run to wake it."""


class DeadlockDetector(trio.abc.Instrument):
    """Watches one trio run; ``failure`` is set with the error the run then fails with."""

    def __init__(self, cushion: float = 1.0, timeout: float | None = None) -> None:
        self.cushion = cushion
        self.timeout = timeout
        self.deadlocks = True
        """Whether to look for deadlocks (off: only the timeout)."""
        self.failure: Exception | None = None
        self.checks = 0
        self.analyses = 0
        self.reason = "no check has run yet"
        """Why no deadlock has been declared (the timeout's message says it)."""
        self._runner: Any = None
        self._attached = False
        self._on_failure: Callable[[], object] = _nothing
        self._started = time.monotonic()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due = self._timed_out = self._in_wait = self._wakeable = False
        self._waits = 0
        self._first: weakref.WeakKeyDictionary[trio.lowlevel.Task, tuple[tuple[int, ...], float]]
        self._first = weakref.WeakKeyDictionary()
        self._cleared: frozenset[tuple[int, ...]] = frozenset()
        self._cleared_until = self._next_check = 0.0
        self._backoff = cushion

    def fresh(self) -> DeadlockDetector:
        """A detector with the same settings, not started (one per trio run)."""
        twin = DeadlockDetector(self.cushion, self.timeout)
        twin.deadlocks = self.deadlocks
        return twin

    @property
    def step(self) -> float:
        return max(min(self.cushion / 4, 0.25), 0.005)

    # -- engagement ----------------------------------------------------------------------------

    def attach(self, runner: Any) -> None:
        """Watch the run ``runner`` is about to start, from its first to its last tick (outside
        the run: the plugin's hook on trio's ``setup_runner``)."""
        self._runner = runner
        self._attached = True
        runner.instruments.add_instrument(self)

    def start(self, on_failure: Callable[[], object]) -> None:
        """Watch the current run from now until ``stop``; ``on_failure`` is called (in the run)
        once ``failure`` is set."""
        self._runner = getattr(_RUN.GLOBAL_RUN_CONTEXT, "runner", None)
        trio.lowlevel.add_instrument(self)
        self._begin(on_failure)

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._end()
        self._runner = None
        with contextlib.suppress(KeyError, RuntimeError):
            trio.lowlevel.remove_instrument(self)

    def _begin(self, on_failure: Callable[[], object]) -> None:
        self._on_failure = on_failure
        self._started = time.monotonic()
        self._token = trio.lowlevel.current_trio_token()
        WATCHED.add(id(self._token))
        self._thread = threading.Thread(target=self._watch, name="tether deadlock detector")
        self._thread.daemon = True
        self._thread.start()

    def _end(self) -> None:
        self._stop.set()
        if self._token is not None:
            WATCHED.discard(id(self._token))
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- the instrument: called by trio's run loop ---------------------------------------------

    def before_run(self) -> None:
        if not self._attached:
            return
        if getattr(self._runner, "is_guest", False):
            # A guest run (anyio's test runner) outlives the test: it is watched from inside,
            # one test at a time, by the plugin's wrapper.
            self._attached = False
            return
        self._begin(self._cancel_run)

    def _cancel_run(self) -> None:
        nursery = getattr(self._runner, "system_nursery", None)
        if nursery is not None:
            nursery.cancel_scope.cancel()

    def after_run(self) -> None:
        if not self._attached:
            return
        self._end()
        if self.failure is not None:
            from outcome import Error

            self._runner.main_task_outcome = Error(self.failure)
        self._runner = None  # it holds the run's result, which the test may mean to drop

    def before_io_wait(self, timeout: float) -> None:
        self._waits += 1
        self._in_wait = True
        if timeout >= self.step and self.deadlocks:
            runner = self._runner
            self._wakeable = not getattr(runner, "waiting_for_idle", True) and (
                timeout != getattr(runner, "clock_autojump_threshold", timeout)
            )
        else:
            self._wakeable = False

    def after_io_wait(self, timeout: float) -> None:
        self._in_wait = False
        if self._due and self._token is not None:
            self._due = False
            self._check()

    # -- the watchdog thread -------------------------------------------------------------------

    def _watch(self) -> None:
        # Signals belong to the main thread (tether.signals reads them from a signalfd there).
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        _THREADS.add(threading.get_ident())
        try:
            seen = -1
            while not self._stop.wait(self.step):
                if self.timeout is not None and time.monotonic() - self._started > self.timeout:
                    self._timed_out = True
                self._due = True
                waits = self._waits
                if self._in_wait and waits == seen and (self._wakeable or self._timed_out):
                    assert self._token is not None
                    try:
                        self._token.run_sync_soon(_nothing, idempotent=True)
                    except trio.RunFinishedError:
                        return
                seen = waits
        finally:
            _THREADS.discard(threading.get_ident())

    # -- the check, inside the run -------------------------------------------------------------

    def _check(self) -> None:
        if self.failure is not None:
            return
        try:
            if self._timed_out:
                self._fail(TimedOut(self._timeout_message()))
            elif self.deadlocks:
                self._look()
        except Exception as exc:  # noqa: BLE001 - trio would remove a raising instrument
            self.deadlocks = False
            self.reason = f"the detector failed ({exc!r}) and stopped looking"

    def _look(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self.checks += 1
        try:
            chains = {t: [obj for obj, _ in await_chain(t)] for t in _all_tasks()}
            runq = set(getattr(self._runner, "runq", ()))
            settled = self._settle(chains, runq, now)
            if not settled:
                self.reason = "every task ran within the last cushion"
                return
            signature = frozenset(settled.values())
            if signature == self._cleared and now < self._cleared_until:
                return
            blocked = {t: classify(t, [frame_of(o) for o in chains[t]]) for t in settled}
            left = math.inf if self.timeout is None else self.timeout - (now - self._started)
            verdict = analyse(
                chains, blocked, skip_threads=set(_THREADS), timeout_left=left,
                extra_roots=self._queued(),
            )  # fmt: skip
            self.analyses += 1
            if verdict.stuck:
                self._fail(Deadlock(deadlock_report(verdict, chains)))
                return
            self.reason = verdict.reason()
            self._backoff = self._backoff * 2 if signature == self._cleared else self.cushion
            self._backoff = min(self._backoff, 8 * self.cushion)
            self._cleared, self._cleared_until = signature, now + self._backoff
        finally:
            self._next_check = now + max(self.step, 20 * (time.monotonic() - now))

    def _settle(
        self, chains: dict[trio.lowlevel.Task, list[Any]], runq: set[Any], now: float
    ) -> dict[trio.lowlevel.Task, tuple[int, ...]]:
        """The tasks whose await frames have not moved for a cushion, with their fingerprints."""
        settled: dict[trio.lowlevel.Task, tuple[int, ...]] = {}
        for task, chain in chains.items():
            if task in runq or not chain:
                self._first.pop(task, None)
                continue
            inner = chain[-1]
            mark = (id(task), id(inner), frame_of(inner).f_lasti, id(task.custom_sleep_data))
            first = self._first.get(task)
            if first is None or first[0] != mark:
                self._first[task] = (mark, now)
            elif now - first[1] >= self.cushion:
                settled[task] = mark
        return settled

    def _queued(self) -> list[object]:
        """Callbacks threads have queued for the run: code about to run."""
        queue = getattr(self._runner, "entry_queue", None)
        jobs = [*getattr(queue, "queue", ()), *getattr(queue, "idempotent_queue", {})]
        return [job for job in jobs if not (isinstance(job, tuple) and job[:1] == (_nothing,))]

    def _timeout_message(self) -> str:
        chains = {t: [obj for obj, _ in await_chain(t)] for t in _all_tasks()}
        why = self.reason if self.deadlocks else "deadlock detection is off for this test"
        return (
            f"the test ran longer than {self.timeout:g}s\n  no deadlock was declared: {why}\n"
            + timeout_report(chains)
        )

    def _fail(self, failure: Exception) -> None:
        self.failure = failure
        self._on_failure()


def _all_tasks() -> list[trio.lowlevel.Task]:
    """Every task of the current run, parents first."""
    found: list[trio.lowlevel.Task] = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        found.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found
