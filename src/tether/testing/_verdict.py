"""``analyse``: which sleeping tasks nothing could ever wake, the way Go's leak profile finds
blocked goroutines, but with a reason for every task that can still wake.

A task that has slept a whole cushion on a known primitive is *blocked*; every other task, every
thread and every Python signal handler is code that may still run. From the running code the
analysis computes what it can reach (``Reach``), then wakes blocked tasks to a fixpoint: a task
is wakeable when its Event, Semaphore, Condition or parking lot is reachable, its Lock's owner
or a CapacityLimiter's borrower can run, a sender (or, for a send, a receiver) of its channel is
reachable, every child of the nursery it waits for can run, a cancel scope around it is
reachable or already cancelled, or its deadline comes before the test's timeout. A woken task
runs code too, so what it reaches is added. Module state counts as reachable only while some
code runs (nothing runs in a deadlock of every task). What is left is deadlocked.
"""

from __future__ import annotations

import math
import signal
import types
from typing import Any

import attrs
import trio
import trio.testing

from ..channels._permit import Permit
from ..inspect._waits import Scopes, Wait, WaitKind, scopes
from ._reach import Reach, TooLarge, state_of
from ._threads import SeenThread, ThreadState, see_threads

INTERNAL = ("<init>", "<TrioToken.run_sync_soon task>")
"""The run's own tasks: they run only what a thread or signal hands them."""


@attrs.frozen
class MemoryEnd:
    """A wait on a trio memory channel or an anyio memory object stream: the class of the end
    that wakes it, whether it receives, and whether the object is trio's (else anyio's)."""

    other: str
    receives: bool
    trio: bool


OTHER_END = {
    WaitKind.MEMORY_RECEIVE: MemoryEnd("MemorySendChannel", receives=True, trio=True),
    WaitKind.MEMORY_SEND: MemoryEnd("MemoryReceiveChannel", receives=False, trio=True),
    WaitKind.ANYIO_RECEIVE: MemoryEnd("MemoryObjectSendStream", receives=True, trio=False),
    WaitKind.ANYIO_SEND: MemoryEnd("MemoryObjectReceiveStream", receives=False, trio=False),
}
"""The waits on a trio memory channel or an anyio memory object stream: the two count their
open ends alike, and a dropped end of either is not closed."""


@attrs.frozen
class Blocked:
    """A task asleep a whole cushion: what it waits on and what could cancel it."""

    wait: Wait
    scopes: Scopes


@attrs.frozen
class Verdict:
    """The outcome of one analysis."""

    stuck: dict[trio.lowlevel.Task, Blocked]
    """The deadlocked tasks (empty if none)."""
    woken: dict[trio.lowlevel.Task, str]
    """Why each other blocked task can still wake."""
    running: tuple[str, ...]
    """The code that still runs: tasks, threads, signal handlers."""
    note: str = ""
    """Why the analysis could not decide, if it could not."""

    def reason(self) -> str:
        """Why no deadlock was declared, in one line."""
        if self.note:
            return self.note
        if not self.woken:
            return "no task has slept a whole cushion on something the detector knows"
        woken = [(t, r) for t, r in self.woken.items() if t.name not in INTERNAL]
        why = "; ".join(f"task {t.name!r} {r}" for t, r in woken[:3])
        return why + (f"; and {len(woken) - 3} more" if len(woken) > 3 else "")


def analyse(
    chains: dict[trio.lowlevel.Task, list[Any]],
    blocked: dict[trio.lowlevel.Task, Wait],
    *,
    skip_threads: set[int],
    timeout_left: float,
    extra_roots: list[object],
    runner: Any = None,
    limit: int = 400_000,
) -> Verdict:
    """Decide which of ``blocked`` (a wait per task asleep a cushion; ``chains`` holds every
    task's await chain) nothing can wake before ``timeout_left`` seconds; ``extra_roots`` are
    callbacks about to run (queued by threads); ``runner`` is trio's, whose system tasks are
    cancelled when its main task ends."""
    threads = see_threads(skip_threads)
    workers = {t.task: t for t in threads if t.task is not None}
    waits: dict[trio.lowlevel.Task, Blocked] = {}
    for task, wait in blocked.items():
        if task.name in INTERNAL:
            continue
        worker = workers.get(task) if wait.kind is WaitKind.THREAD else None
        if worker is not None:  # waits in to_thread for this thread: as stuck as it is
            waits[task] = Blocked(Wait(WaitKind.THREAD, worker, wait.frame), scopes(task))
        elif not wait.kind.external:
            waits[task] = Blocked(wait, scopes(task))
    running = [t for t in chains if t not in waits and t.name not in INTERNAL]
    reach = Reach([obj for chain in chains.values() for obj in chain], limit)
    end = _RunEnd(runner, running)
    try:
        return _decide(waits, running, chains, reach, threads, timeout_left, extra_roots, end)
    except TooLarge as exc:
        return Verdict({}, {}, (), f"the analysis gave up: {exc}")
    finally:
        reach.close()  # what it reached must not outlive the verdict (issue 42)
        waits.clear()
        running.clear()
        workers.clear()
        for thread in threads:
            thread.roots.clear()
            thread.module_state.clear()
        threads.clear()


def _decide(
    waits: dict[trio.lowlevel.Task, Blocked],
    running: list[trio.lowlevel.Task],
    chains: dict[trio.lowlevel.Task, list[Any]],
    reach: Reach,
    threads: list[SeenThread],
    timeout_left: float,
    extra_roots: list[object],
    end: _RunEnd,
) -> Verdict:
    """``analyse``'s verdict, from the reach of the code that runs (the caller lets go of the
    reach, so nothing found outlives the verdict)."""
    for task in running:
        reach.add_chain(chains[task])
    runs = Threads(threads)
    for thread in runs.running:
        reach.add_thread(thread)
    handlers = _signal_handlers()
    reach.add(handlers.values())
    reach.add(extra_roots)
    alive = [f"task {t.name!r}" for t in running] + [f"thread {t.name!r}" for t in runs.running]
    alive += [f"the handler of {name}" for name in handlers]
    if extra_roots:
        alive.append("callbacks queued by threads")
    tasks_run = bool(running or handlers or extra_roots)
    woken = _fixpoint(waits, chains, reach, runs, tasks_run, timeout_left, end)
    stuck = {t: b for t, b in waits.items() if t not in woken}
    if stuck and reach.unfollowed:
        return Verdict({}, woken, tuple(alive), f"running code reaches {reach.unfollowed}")
    if stuck and not any(_endless(b, reach, timeout_left) for b in stuck.values()):
        note = "the tasks left asleep only sleep until a deadline past the test's timeout"
        return Verdict({}, woken, tuple(alive), note)
    return Verdict(stuck, woken, tuple(alive))


class _RunEnd:
    """trio's run cancels its system nursery when its main task ends: a system task sleeping
    until then wakes once the main task can run (a library's task that sleeps until the run
    ends is no deadlock while the test goes on)."""

    def __init__(self, runner: Any, running: list[trio.lowlevel.Task]) -> None:
        nursery = getattr(runner, "system_nursery", None)
        self.main = getattr(runner, "main_task", None)
        self.scope = id(nursery.cancel_scope) if nursery is not None else 0
        done = getattr(runner, "main_task_outcome", None) is not None
        self.comes = done or (self.main is not None and self.main in running)
        """Whether the main task can run or has ended (``<init>`` is then about to cancel the
        system nursery), so the system nursery's cancel comes."""

    def woke(self, task: trio.lowlevel.Task) -> None:
        self.comes = self.comes or task is self.main


class Threads:
    """Which threads run: those running from the start, then those woken (a blocked thread
    whose primitive running code reaches; a parked one once a task runs or a callback is
    queued, either of which may answer it)."""

    def __init__(self, threads: list[SeenThread]) -> None:
        self.running = [t for t in threads if t.state is ThreadState.RUNNING]
        self.blocked = [t for t in threads if t.state is ThreadState.BLOCKED]
        self.parked = [t for t in threads if t.state is ThreadState.PARKED]
        self.runs = {t.ident for t in self.running}

    def wake(self, reach: Reach, tasks_run: bool) -> bool:
        """Wake what running code can now wake, adding what each woken thread reaches;
        whether any woke."""
        woke = [t for t in self.blocked if t.obj in reach]
        if tasks_run:  # a task or a queued callback may be what answers a parked thread
            woke += self.parked
            self.parked = []
        self.blocked = [t for t in self.blocked if t not in woke]
        for thread in woke:
            self.runs.add(thread.ident)
            reach.add_thread(thread)
        return bool(woke)


def _fixpoint(
    waits: dict[trio.lowlevel.Task, Blocked],
    chains: dict[trio.lowlevel.Task, list[Any]],
    reach: Reach,
    threads: Threads,
    tasks_run: bool,
    timeout_left: float,
    end: _RunEnd,
) -> dict[trio.lowlevel.Task, str]:
    """Wake tasks and threads until nothing more wakes. Module state as a whole is added only
    once a task, a handler or a callback runs: a thread reaches what its own code reaches."""
    woken: dict[trio.lowlevel.Task, str] = {}
    with_globals = False
    while True:
        progress = False
        code_runs = tasks_run or bool(threads.runs)
        for task, blocked in waits.items():
            if task in woken:
                continue
            why = _waker(blocked, waits, woken, reach, code_runs, timeout_left, threads.runs, end)
            if why is not None:
                woken[task] = why
                end.woke(task)
                reach.add_chain(chains[task])
                tasks_run = progress = True
        if threads.wake(reach, tasks_run):
            progress = True
        if progress:
            continue
        if len(woken) == len(waits) or not tasks_run or with_globals:
            return woken
        reach.add_globals()
        with_globals = True


def _runs(task: Any, waits: dict[trio.lowlevel.Task, Blocked], woken: dict[Any, str]) -> bool:
    return task not in waits or task in woken


def _waker(
    blocked: Blocked,
    waits: dict[trio.lowlevel.Task, Blocked],
    woken: dict[trio.lowlevel.Task, str],
    reach: Reach,
    code_runs: bool,
    timeout_left: float,
    threads_run: set[int],
    end: _RunEnd,
) -> str | None:
    """Why this blocked task can still wake, or ``None``."""
    sc = blocked.scopes
    if sc.cancelled:
        return "is being cancelled"
    if end.comes and any(id(scope) == end.scope for scope in sc.scopes):
        return "is a system task, cancelled when the run's main task ends, which can run"
    if any(id(scope) in reach.scopes for scope in sc.scopes):
        return "can be cancelled by running code that holds its cancel scope or nursery"
    if not sc.known:
        return "may have a deadline (trio's cancel scopes could not be read)"
    comes = _deadline_comes(sc.deadline, reach, timeout_left)
    if comes is not None:
        return comes
    wait = blocked.wait
    kind, obj = wait.kind, wait.obj
    if kind is WaitKind.UNKNOWN:
        if code_runs:
            return "waits on something the detector does not know, while other code runs"
        return None
    if kind is WaitKind.SLEEP:
        return None
    if obj is None:
        return "waits on an object the detector could not read"
    if kind is WaitKind.THREAD:
        if obj.ident in threads_run:
            return f"waits in to_thread for thread {obj.name!r}, which runs"
        return None
    if kind is WaitKind.NURSERY:
        children = obj.child_tasks
        if all(_runs(child, waits, woken) for child in children):
            return "waits for children that can all run"
        return None
    if kind is WaitKind.LOCK:
        owner = obj.statistics().owner
        if owner is None or _runs(owner, waits, woken):
            return "waits on a Lock whose owner can run"
        return None
    if kind is WaitKind.LIMITER:
        borrowers = obj.statistics().borrowers
        if obj in reach or any(_runs(b, waits, woken) for b in borrowers):
            return "waits on a CapacityLimiter that running code can release"
        return None
    if kind is WaitKind.EVENT and obj.is_set():
        return "waits on an Event that is set"
    if kind in (WaitKind.EVENT, WaitKind.SEMAPHORE, WaitKind.CONDITION, WaitKind.LOT):
        return f"waits on {kind.value} that running code can reach" if obj in reach else None
    if kind in OTHER_END:
        return _stream_waker(kind, obj, reach)
    return _channel_waker(kind, obj, reach)


def _stream_waker(kind: WaitKind, end: Any, reach: Reach) -> str | None:
    """A receiver wakes by a send or the last sender's close, a sender by a receive or the
    last receiver's close."""
    state, wait = end._state, OTHER_END[kind]
    noun = "a memory channel" if wait.trio else "an anyio memory stream"
    items = state.data if wait.trio else state.buffer
    if wait.receives and (items or not state.open_send_channels):
        return f"waits on {noun} that has data or no sender left"
    if not wait.receives and not state.open_receive_channels:
        return f"sends on {noun} with no receiver left"
    for handle in reach.handles:
        if type(handle).__name__ == wait.other and handle._state is state and not handle._closed:
            return f"waits on {noun} whose other end running code holds"
    return None


def _channel_waker(kind: WaitKind, obj: Any, reach: Reach) -> str | None:
    receiving = kind is WaitKind.TETHER_RECEIVE
    if receiving and not obj.live and not getattr(obj, "reserved", 0):
        return "waits on a tether channel with no sender left"
    for handle in reach.handles:
        state = state_of(handle)
        if state is not obj:
            continue
        if type(handle) is Permit:  # an unsent value on its way in
            if receiving and not handle._used:
                return "waits on a tether channel whose unsent Permit running code holds"
            continue
        strong = getattr(handle, "_key", None) is not None
        weak = hasattr(handle, "upgrade") and bool(obj.live)
        is_sender = hasattr(handle, "_key") or hasattr(handle, "upgrade")
        if receiving and is_sender and (strong or weak):
            return "waits on a tether channel whose sender running code holds"
        if not receiving and not is_sender:
            return "sends on a tether channel whose receiver running code holds"
    return None


def _deadline_comes(deadline: float, reach: Reach, timeout_left: float) -> str | None:
    if math.isinf(deadline):
        return None
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, trio.testing.MockClock):
        if clock.autojump_threshold < math.inf:
            return "has a deadline, and the MockClock autojumps"
        if clock.rate > 0:
            left = (deadline - clock.current_time()) / clock.rate
            return f"has a deadline in {left:.1f}s" if left <= timeout_left else None
        if clock in reach:
            return "has a deadline, and running code can jump the MockClock"
        return None
    left = deadline - trio.current_time()
    return f"has a deadline in {max(left, 0):.1f}s" if left <= timeout_left else None


def _endless(blocked: Blocked, reach: Reach, timeout_left: float) -> bool:
    """Whether the task sleeps for good, not merely until a deadline after the timeout."""
    if blocked.wait.kind is WaitKind.NURSERY:
        return False
    if blocked.wait.kind is not WaitKind.SLEEP:
        return True
    deadline = blocked.scopes.deadline
    return math.isinf(deadline) or _deadline_comes(deadline, reach, math.inf) is None


def _signal_handlers() -> dict[str, Any]:
    """The Python signal handlers that are not trio's or the interpreter's own."""
    found = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if not callable(handler) or handler is signal.default_int_handler:
            continue
        code = getattr(handler, "__code__", None)
        if isinstance(code, types.CodeType) and "/trio/" in code.co_filename.replace("\\", "/"):
            continue
        found[signal.Signals(sig).name] = handler
    return found
