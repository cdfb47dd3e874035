"""``DeadlockDetector``: a trio run in which some tasks wait on each other, or on things nothing
that runs can reach, fails in about a cushion with each task's line and who holds what it waits
on; a hard timeout says why no deadlock was declared.

Go's runtime says "all goroutines are asleep - deadlock!" and its leak profile finds goroutines
blocked on what nothing can reach; trio cannot in general (trio issues 182 and 1085). A test
can. The detector is a tick of the one watchdog thread (``_watchdog``): every quarter cushion
it hands the run a check through ``run_sync_soon``, unless the wake-up would disturb a
``wait_all_tasks_blocked`` cushion or an autojump threshold. The check runs inside the run:
tasks whose await frames have not moved for a whole cushion are handed to ``analyse``
(``_verdict``), which decides by reachability which of them nothing could ever wake, even while
other tasks run, sleep or wait on sockets. No instrument is installed, so the run loop pays
nothing per turn. The check costs at most a twentieth of the time between checks. The hard
timeout is the same thread, never a trio deadline (a deadline would make every deadlocked run
look alive).

The detector changes nothing the program does (issue 42): no frame, wait or handle an analysis
found outlives its verdict (a sender kept alive would hold its channel open), and a deadlock on
something no task holds is looked at again after a garbage collection, since garbage whose
finalizer closes a channel or gives a permit back is no deadlock.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from ..inspect._waits import TRIO_DIR, Wait, await_chain, classify, frame_of
from ._engage import _RUN
from ._report import Holders, deadlock_report, timeout_report
from ._verdict import Verdict, analyse
from ._watchdog import WATCHDOG

KNOWS_TRIO = (
    hasattr(_RUN, "setup_runner")
    and hasattr(getattr(_RUN, "Runner", None), "close")
    and all(
        os.path.exists(os.path.join(TRIO_DIR, *path))
        for path in (("_threads.py",), ("_signals.py",), ("_core", "_run.py"))
    )
)
"""Whether trio is laid out as the detector expects (trio 0.25 to 0.35 at least): where it
starts a run and where its thread and signal waits live. Without it the plugin turns deadlock
detection off and says so (the hard timeout still works)."""

_UNHELD = "a holder in no task"
"""What ``_analysis`` says of a deadlock on something no task holds, before collecting."""
UNENDING = 5.0
"""Seconds a failed, cancelled run may go on before its failure is said on stderr."""

WATCHED: set[int] = set()
"""ids of the trio runners a detector watches now (one detector per run)."""


class Deadlock(Exception):
    """Tasks of the run wait on each other or on what nothing can reach; the message is the
    report."""

    __module__ = "tether.testing"  # shown in a failing test's report as it is imported


class TimedOut(Exception):
    """The test ran longer than its hard timeout; the message says why no deadlock was declared
    and holds every task's line."""

    __module__ = "tether.testing"


def _nothing() -> None:
    """What a stopped detector calls on failure."""


class DeadlockDetector:
    """Watches one trio run; ``failure`` is set with the error the run then fails with."""

    def __init__(self, cushion: float = 1.0, timeout: float | None = None) -> None:
        self.cushion = cushion
        """Seconds every task must sleep before a deadlock is declared."""
        self.timeout = timeout
        """Seconds before the run fails as timed out (``None``: never)."""
        self.deadlocks = True
        """Whether to look for deadlocks (off: only the timeout)."""
        self.terminal: int | None = None
        """A descriptor for what must be seen even while pytest captures (``None``: stderr)."""
        self.failure: Exception | None = None
        """The error the run fails with, once one is found."""
        self.checks = 0
        """How many times the run was found asleep and looked at."""
        self.analyses = 0
        """How many of those looks went as far as following references."""
        self.reason = "no check has run yet"
        """Why no deadlock has been declared (the timeout's message says it)."""
        self._runner: Any = None
        self._attached = False
        self._on_failure: Callable[[], object] = _nothing
        self._started = time.monotonic()
        self._timed_out = False
        self._failed_at = 0.0
        self._step = 0.25
        self._first: weakref.WeakKeyDictionary[trio.lowlevel.Task, tuple[tuple[int, ...], float]]
        self._first = weakref.WeakKeyDictionary()
        self._cleared: frozenset[tuple[int, ...]] = frozenset()
        self._cleared_until = self._next_check = 0.0
        self._backoff = cushion

    def fresh(self) -> DeadlockDetector:
        """A detector with the same settings, not started (one per trio run)."""
        twin = DeadlockDetector(self.cushion, self.timeout)
        twin.deadlocks = self.deadlocks
        twin.terminal = self.terminal
        return twin

    @property
    def step(self) -> float:
        """How often the watchdog ticks this detector: a quarter cushion, at most 0.25 s."""
        return self._step

    # -- engagement ----------------------------------------------------------------------------

    def attach(self, runner: Any) -> None:
        """Watch the run ``runner`` is about to start until ``finish`` (outside the run: the
        plugin's hooks on trio's ``setup_runner`` and ``Runner.close``)."""
        self._runner = runner
        self._attached = True
        self._begin(self._cancel_run)

    def start(self, on_failure: Callable[[], object]) -> None:
        """Watch the current run from now until ``stop``; ``on_failure`` is called (in the run)
        once ``failure`` is set."""
        self._runner = getattr(_RUN.GLOBAL_RUN_CONTEXT, "runner", None)
        self._begin(on_failure)

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._end()
        self._runner = None

    def finish(self) -> None:
        """The attached run is closing (``Runner.close``): stop, and make a failure the run's
        outcome."""
        self._end()
        if self.failure is not None and self._runner is not None:
            from outcome import Error

            self._runner.main_task_outcome = Error(self.failure)
        self._runner = None  # it holds the run's result, which the test may mean to drop

    def _begin(self, on_failure: Callable[[], object]) -> None:
        self._on_failure = on_failure
        self._step = max(min(self.cushion / 4, 0.25), 0.005)
        self._started = time.monotonic()
        WATCHED.add(id(self._runner))
        WATCHDOG.add(self)

    def _end(self) -> None:
        WATCHDOG.discard(self)
        self._on_failure = _nothing  # a bound method of ours would make us cyclic garbage
        WATCHED.discard(id(self._runner))

    def _cancel_run(self) -> None:
        nursery = getattr(self._runner, "system_nursery", None)
        if nursery is not None:
            nursery.cancel_scope.cancel()

    # -- the watchdog thread -------------------------------------------------------------------

    def tick(self) -> None:
        """Called by the watchdog thread every ``step``: note the timeout and hand the run a
        check, unless that would disturb a wait that must elapse undisturbed."""
        runner = self._runner
        queue = getattr(runner, "entry_queue", None)
        if queue is None or getattr(queue, "done", False):
            self._end()  # the run is over (it outlived the hook that would say so)
            return
        if self._attached and getattr(runner, "is_guest", False):
            # A guest run (anyio's test runner) outlives the test: it is watched from inside,
            # one test at a time, by the plugin's wrapper.
            self._end()
            return
        if self.failure is not None:
            self._unending()
            return
        if self.timeout is not None and time.monotonic() - self._started > self.timeout:
            self._timed_out = True
        elif not (self.deadlocks and self._undisturbed(runner)):
            return
        try:
            queue.run_sync_soon(self._check, idempotent=True)
        except trio.RunFinishedError:
            self._end()

    def _unending(self) -> None:
        """The run was failed and cancelled but goes on: a task waits for a thread that trio
        cannot cancel (``to_thread.run_sync`` without ``abandon_on_cancel``). After a grace,
        say the failure on stderr once: pytest cannot report a test that never returns."""
        if self._failed_at and time.monotonic() - self._failed_at > UNENDING:
            self._failed_at = 0.0
            text = (
                f"tether: this test's run cannot end; it failed with\n{self.failure}\n(a task "
                "that waits for a thread ends only when that thread does: use "
                "trio.to_thread.run_sync(..., abandon_on_cancel=True))\n"
            )
            if self.terminal is None:
                print(text, end="", file=sys.__stderr__, flush=True)
            else:
                os.write(self.terminal, text.encode())

    def _undisturbed(self, runner: Any) -> bool:
        """Whether waking the run now disturbs nothing: no task waits in
        ``wait_all_tasks_blocked``, and no autojump threshold long enough to be reset by a
        wake-up is counting (each must elapse with the run idle)."""
        if getattr(runner, "waiting_for_idle", True):
            return False
        threshold = getattr(runner, "clock_autojump_threshold", math.inf)
        return not self._step <= threshold < math.inf

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
            report = self._analysis(now, collected=False)
            if report is _UNHELD:
                # What keeps the tasks asleep is held by no task: it may be garbage in a cycle
                # the collector has not freed yet, whose finalizers would close a channel or
                # give a permit back. Collect, and fail only if the deadlock outlives that.
                queued = len(self._queued())
                gc.collect()
                if len(self._queued()) > queued:
                    self.reason = "finalizers queued callbacks: looking again once they ran"
                    return
                report = self._analysis(now, collected=True)
            if report is not None:
                self._fail(Deadlock(report))
        finally:
            self._next_check = now + max(self._step, 20 * (time.monotonic() - now))

    def _analysis(self, now: float, *, collected: bool) -> str | None:
        """One look at the run: the deadlock's report, ``_UNHELD`` for a deadlock on something
        no task holds while the garbage collector has not run (``collected``), or ``None``.
        Nothing it found outlives it: a frame or a handle kept here would keep a channel open."""
        chains = {t: [obj for obj, _ in await_chain(t)] for t in _all_tasks()}
        blocked: dict[trio.lowlevel.Task, Wait] = {}
        try:
            runq = set(getattr(self._runner, "runq", ()))
            settled = self._settle(chains, runq, now)
            runq.clear()
            if not settled:
                self.reason = "every task ran within the last cushion"
                return None
            signature = frozenset(settled.values())
            if signature == self._cleared and now < self._cleared_until:
                return None
            blocked.update((t, classify(t, [frame_of(o) for o in chains[t]])) for t in settled)
            settled.clear()
            left = math.inf if self.timeout is None else self.timeout - (now - self._started)
            # A deadline within a cushion of the timeout still counts: this check cannot tell
            # a task that sleeps in a loop from one that slept once, and the timeout fires
            # before the next check would (a loop of short sleeps is not a deadlock).
            left += self.cushion
            verdict = analyse(
                chains, blocked, skip_threads={WATCHDOG.ident or 0}, timeout_left=left,
                extra_roots=self._queued(), runner=self._runner,
            )  # fmt: skip
            self.analyses += 1
            if verdict.stuck:
                return self._report(verdict, chains, collected)
            self.reason = verdict.reason()
            self._backoff = self._backoff * 2 if signature == self._cleared else self.cushion
            self._backoff = min(self._backoff, 8 * self.cushion)
            self._cleared, self._cleared_until = signature, now + self._backoff
            return None
        finally:
            chains.clear()
            blocked.clear()

    @staticmethod
    def _report(
        verdict: Verdict, chains: dict[trio.lowlevel.Task, list[Any]], collected: bool
    ) -> str | None:
        """The deadlock's report, or ``_UNHELD`` if a holder is in no task and the garbage
        collector has not run yet."""
        holders = Holders(chains)
        try:
            report = deadlock_report(verdict, chains, holders)
            return _UNHELD if holders.unheld and not collected else report
        finally:
            holders.close()
            verdict.stuck.clear()
            verdict.woken.clear()

    def _settle(
        self, chains: dict[trio.lowlevel.Task, list[Any]], runq: set[Any], now: float
    ) -> dict[trio.lowlevel.Task, tuple[int, ...]]:
        """The tasks whose await frames have not moved for a cushion, with their fingerprints."""
        settled: dict[trio.lowlevel.Task, tuple[int, ...]] = {}
        for task, chain in chains.items():
            if task in runq or _scheduled(task) or not chain:
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
        return [job for job in jobs if not (isinstance(job, tuple) and _ours(job[0]))]

    def _timeout_message(self) -> str:
        chains = {t: [obj for obj, _ in await_chain(t)] for t in _all_tasks()}
        why = self.reason if self.deadlocks else "deadlock detection is off for this test"
        return (
            f"the test ran longer than {self.timeout:g}s\n  no deadlock was declared: {why}\n"
            + timeout_report(chains)
        )

    def _fail(self, failure: Exception) -> None:
        self.failure = failure
        self._failed_at = time.monotonic()
        self._on_failure()


def _scheduled(task: trio.lowlevel.Task) -> bool:
    """Whether trio has scheduled the task to run: in the run queue, or in the batch the run
    loop took out of it and is running now (a task waiting to be resumed has its next send
    set, whichever queue holds it)."""
    return getattr(task, "_next_send_fn", None) is not None


def _ours(fn: object) -> bool:
    return isinstance(getattr(fn, "__self__", None), DeadlockDetector)


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
