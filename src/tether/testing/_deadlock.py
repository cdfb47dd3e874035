"""``DeadlockDetector``: a trio run whose every task has been asleep for a cushion, with nothing
that could ever wake one, is a deadlock; say so with every task's line and channel holders.

Go's runtime says "all goroutines are asleep - deadlock!"; trio cannot in general (a task may
wait for any file descriptor or thread; trio issues 182 and 1085). A test can: nothing outside
it will come. The detector is an instrument that notes when the run loop starts waiting with
no task runnable, and a watchdog thread that, once the loop has waited a whole cushion, asks
the run (through ``TrioToken.run_sync_soon``) whether anything could still wake a task:

- a task waiting on I/O (a socket, a pipe, a pidfd: trio's I/O statistics say how many);
- a deadline that will come (any deadline on a real clock; on a ``MockClock`` only if it
  autojumps or runs);
- a task in a thread (``trio.to_thread``, tether's worker threads), a pending
  ``run_sync_soon``, a task in ``wait_all_tasks_blocked``, or a trio signal receiver.

If nothing could, the test fails with ``Deadlock`` and the report, and is cancelled. The hard
timeout uses the same thread, never a trio deadline (a deadline would hide every deadlock).
"""

from __future__ import annotations

import contextlib
import linecache
import math
import os
import signal
import threading
import time
import types
from collections.abc import Callable, Iterator

import trio
import trio.testing

_FOREVER = 86400 - 1  # trio caps an I/O wait at a day: a wait this long has no deadline
_TRIO = os.path.dirname(trio.__file__)
_TETHER = os.path.dirname(os.path.dirname(__file__))
_HERE = os.path.dirname(__file__)
_THREAD_WAITS = (
    (os.path.join(_TRIO, "_threads.py"), None),
    (os.path.join(_TETHER, "_worker.py"), "run"),
)
_EXTERNAL = (
    (os.path.join(_TRIO, "_core", "_run.py"), "wait_all_tasks_blocked"),
    (os.path.join(_TRIO, "_signals.py"), None),
)
KNOWS_TRIO = all(os.path.exists(path) for path, _ in (*_THREAD_WAITS, *_EXTERNAL))
"""Whether trio's files are where the detector looks for tasks that wait on threads or
signals (trio 0.25 to 0.35 at least). Without them it could take such a wait for a deadlock,
so the plugin then turns deadlock detection off and says so (the hard timeout still works)."""


class Deadlock(Exception):
    """Every task of the run is asleep and nothing can wake one; the message is the report."""


class TimedOut(Exception):
    """The test ran longer than its hard timeout; the message holds every task's stack."""


class DeadlockDetector(trio.abc.Instrument):
    """Watches one trio run; ``found`` is set with the failure to raise."""

    def __init__(self, cushion: float = 1.0, timeout: float | None = None) -> None:
        self.cushion = cushion
        self.timeout = timeout
        self.deadlocks = True
        """Whether to look for deadlocks (off: only the timeout)."""
        self.failure: Exception | None = None
        self.checks = 0
        self._on_failure: Callable[[], object] = lambda: None
        self._idle_since: float | None = None
        self._last_wait = 0.0
        """How long the run loop's last wait lasted: the one our check's wake-up ended."""
        self._started = time.monotonic()
        self._token: trio.lowlevel.TrioToken | None = None
        self._pending = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the instrument: called by trio's run loop ---------------------------------------------

    def before_io_wait(self, timeout: float) -> None:
        # Only a wait without end is a candidate: a finite one (a deadline, an autojump, a
        # wait_all_tasks_blocked cushion) ends by itself, and waking it early would starve it.
        if timeout < _FOREVER:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = time.monotonic()

    def after_io_wait(self, timeout: float) -> None:
        idle = self._idle_since
        self._last_wait = 0.0 if idle is None else time.monotonic() - idle
        self._idle_since = None

    # -- the watchdog thread -------------------------------------------------------------------

    def fresh(self) -> DeadlockDetector:
        """A detector with the same settings, not started (one per trio run)."""
        twin = DeadlockDetector(self.cushion, self.timeout)
        twin.deadlocks = self.deadlocks
        return twin

    def start(self, on_failure: Callable[[], object]) -> None:
        """Install the instrument in the current run and start the watchdog thread;
        ``on_failure`` is called (in the run) once ``failure`` is set."""
        self._on_failure = on_failure
        self._started = time.monotonic()
        self._token = trio.lowlevel.current_trio_token()
        trio.lowlevel.add_instrument(self)
        self._thread = threading.Thread(target=self._watch, name="tether deadlock detector")
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and remove the instrument (idempotent)."""
        self._stop.set()
        with contextlib.suppress(KeyError, RuntimeError):
            trio.lowlevel.remove_instrument(self)

    def _watch(self) -> None:
        # Signals belong to the main thread (tether.signals reads them from a signalfd there).
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        step = min(self.cushion / 4, 0.25)
        while not self._stop.wait(step):
            now = time.monotonic()
            idle = self._idle_since
            timed_out = self.timeout is not None and now - self._started > self.timeout
            stuck = self.deadlocks and idle is not None and now - idle >= self.cushion
            if self._pending or not (timed_out or stuck):
                continue
            self._pending = True
            assert self._token is not None
            try:
                self._token.run_sync_soon(self._check, timed_out)
            except trio.RunFinishedError:
                return

    # -- the check, inside the run -------------------------------------------------------------

    def _check(self, timed_out: bool) -> None:
        self._pending = False
        if self.failure is not None:
            return
        self.checks += 1
        if timed_out:
            self._fail(TimedOut(f"the test ran longer than {self.timeout:g}s\n" + report()))
            return
        if self._last_wait < self.cushion or trio.lowlevel.current_statistics().tasks_runnable:
            return  # something ran meanwhile
        if waker() is None:
            self._fail(Deadlock("all tasks are asleep\n" + report()))

    def _fail(self, failure: Exception) -> None:
        self.failure = failure
        self._on_failure()


def waker() -> str | None:
    """What could still wake a task of the current run, or ``None`` if nothing can."""
    stats = trio.lowlevel.current_statistics()
    io = stats.io_statistics
    waiting = getattr(io, "tasks_waiting_read", 0) + getattr(io, "tasks_waiting_write", 0)
    waiting += getattr(io, "tasks_waiting_overlapped", 0)
    if waiting:
        return f"{waiting} tasks wait on I/O"
    if stats.run_sync_soon_queue_size:
        return "a run_sync_soon callback is queued"
    if stats.seconds_to_next_deadline < math.inf and _deadlines_come():
        return f"a deadline in {stats.seconds_to_next_deadline:.3f}s"
    for task in all_tasks():
        for frame, _ in task.iter_await_frames():
            where = (frame.f_code.co_filename, frame.f_code.co_name)
            for path, name in _THREAD_WAITS:
                if where[0] == path and name in (None, where[1]):
                    return f"task {task.name!r} waits on a thread"
            for path, name in _EXTERNAL:
                if where[0] == path and name in (None, where[1]):
                    return f"task {task.name!r} waits in {where[1]}"
    return None


def _deadlines_come() -> bool:
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, trio.testing.MockClock):
        return clock.rate > 0 or clock.autojump_threshold < math.inf
    return True


def all_tasks() -> list[trio.lowlevel.Task]:
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


def report() -> str:
    """Each task (but the run's and the test machinery's own), the line it waits on, and for a
    task waiting on a tether channel, the channel's live senders and where they were made."""
    lines = []
    for task in all_tasks():
        frames = [frame for frame, _ in task.iter_await_frames()]
        if not frames or _is_internal(task, frames):
            continue
        frame = _user_frame(frames)
        lines.append(f"  task {task.name!r} waits at {_where(frame)}")
        lines.extend(_channel_lines(frames))
    return "\n".join(lines) if lines else "  (no task to show)"


def _is_internal(task: trio.lowlevel.Task, frames: list[types.FrameType]) -> bool:
    """The run's own tasks and the test machinery's: no frame of theirs is user code."""
    if task.name.startswith("<TrioToken.run_sync_soon task>") or task.name == "<init>":
        return True
    return all(_machinery(frame.f_code.co_filename) for frame in frames)


def _machinery(path: str) -> bool:
    return path.startswith((_TRIO, _HERE)) or "pytest_trio" in path or "_pytest" in path


def _user_frame(frames: list[types.FrameType]) -> types.FrameType:
    """The innermost frame outside trio and tether's own code: the test's line."""
    for frame in reversed(frames):
        path = frame.f_code.co_filename
        if not path.startswith(_TRIO) and not path.startswith(_TETHER):
            return frame
    return frames[-1]


def _where(frame: types.FrameType) -> str:
    path, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(path, line).strip()
    return f"{path}:{line} in {frame.f_code.co_name}: {source}"


def _channel_lines(frames: list[types.FrameType]) -> Iterator[str]:
    for frame in frames:
        receiver = frame.f_locals.get("self")
        holders = getattr(receiver, "holders", None)
        if holders is None or not frame.f_code.co_filename.startswith(
            os.path.join(_TETHER, "channels")
        ):
            continue
        chan = getattr(receiver, "_chan", None)
        what = chan.label if chan is not None else "a channel"
        live = holders()
        if not live:
            yield f"    on {what}: no live sender"
        for holder in live:
            task = f" in task {holder.task!r}" if holder.task else ""
            yield f"    on {what}: held by {holder.name!r} made at {holder.site}{task}"
        return
