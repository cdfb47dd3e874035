"""The deadlock detector sees threads, not guesses them (issue 42 part 2): a thread blocked
with no timeout in a known primitive is asleep on it, so a task in ``to_thread`` behind such a
thread is named; a thread reaches the module state its code names, not every module, so a
background thread no longer hides a deadlock on a global. And the neighbours that must pass:
the same primitives released later by a task, a thread, an executor, a module the thread's
code names."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from test_testing_deadlocks import INI, _durations, _one_failure_within_2s

pytest_plugins = ["pytester"]

DEAD = """import concurrent.futures, logging, logging.handlers, queue, threading, time
import anyio, anyio.to_thread, pytest, trio

def run(fn, *args):
    return trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

async def test_event():
    await run(threading.Event().wait)

async def test_lock_in_a_with():
    lock = threading.Lock()
    lock.acquire()
    def take():
        with lock:
            pass
    await run(take)

async def test_rlock_held_by_a_blocked_thread():
    lock, held = threading.RLock(), threading.Event()
    def hold():
        with lock:
            held.set()
            threading.Event().wait()
    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    def take():
        lock.acquire()
    await run(take)

async def test_queue_get():
    await run(queue.Queue().get)

async def test_simple_queue_get():
    q = queue.SimpleQueue()
    def take():
        return q.get()
    await run(take)

async def test_condition():
    cond = threading.Condition()
    def wait():
        with cond:
            cond.wait()
    await run(wait)

async def test_a_future_nobody_completes():
    await run(concurrent.futures.Future().result)

async def test_anyio_to_thread():
    await anyio.to_thread.run_sync(threading.Semaphore(0).acquire, abandon_on_cancel=True)

REGISTRY = {}

async def test_a_registry_beside_a_queue_listener():
    listener = logging.handlers.QueueListener(queue.Queue(), logging.NullHandler())
    listener.start()
    try:
        REGISTRY["listened"] = trio.Event()
        await REGISTRY["listened"].wait()
    finally:
        listener.stop()

async def test_a_registry_beside_a_sleeping_thread():
    threading.Thread(target=time.sleep, args=(60,), daemon=True, name="pusher").start()
    REGISTRY["pushed"] = trio.Event()
    await REGISTRY["pushed"].wait()
"""


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
def test_tasks_behind_blocked_threads_and_registries_beside_threads_are_named(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_dead=DEAD)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--durations=0", "-vv", timeout=240
    )
    out = result.stdout.str()
    result.assert_outcomes(failed=10)
    assert out.count("Deadlock: ") >= 10, out
    assert "TimedOut" not in out, out
    durations = _durations(out)
    assert len(durations) == 10, out
    # Within the cushion and a second on a quiet machine; room here for a loaded CI machine.
    assert max(durations.values()) < 10, durations
    waits = ("threading.Event.wait", "threading.Lock.acquire", "threading.RLock.acquire",
             "queue.Queue.get", "queue.SimpleQueue.get", "threading.Condition.wait",
             "concurrent.futures._base.Future.result", "threading.Semaphore.acquire")  # fmt: skip
    for what in waits:
        assert f"on {what}: nothing that runs reaches it" in out, (what, out)
    assert re.search(r'in to_thread for thread "take from .*", blocked at .*test_dead.py:\d+ '
                     r"in take: with lock:", out), out  # fmt: skip
    assert "still running, unable to reach them: thread 'pusher'" in out, out


WORKING = """import concurrent.futures, queue, threading, time
import pytest, trio
import helper

DELAY = 1.0  # over three cushions

def run(fn, *args):
    return trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

async def later(fn):
    await trio.sleep(DELAY)
    fn()

def after(fn):
    def go():
        time.sleep(DELAY)
        fn()
    threading.Thread(target=go, daemon=True).start()

async def test_an_event_a_task_sets_later():
    event = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(later, event.set)
        await run(event.wait)

async def test_a_lock_a_task_releases_later():
    lock = threading.Lock()
    lock.acquire()
    def take():
        with lock:
            pass
    async with trio.open_nursery() as nursery:
        nursery.start_soon(later, lock.release)
        await run(take)

async def test_a_queue_a_thread_feeds_later():
    q = queue.Queue()
    after(lambda: q.put(1))
    assert await run(q.get) == 1

async def test_a_condition_a_thread_notifies_later():
    cond = threading.Condition()
    done = []
    def notify():
        with cond:
            done.append(1)
            cond.notify_all()
    def wait():
        with cond:
            cond.wait_for(lambda: done)
    after(notify)
    await run(wait)

async def test_a_future_an_executor_completes():
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(time.sleep, DELAY)
        await run(future.result)

async def test_a_barrier_a_thread_crosses_later():
    barrier = threading.Barrier(2)
    after(barrier.wait)
    await run(barrier.wait)

async def test_a_chain_of_threads():
    first, second = threading.Event(), threading.Event()
    def relay():
        first.wait()
        second.set()
    threading.Thread(target=relay, daemon=True).start()
    after(first.set)
    await run(second.wait)

REGISTRY = {}

async def test_a_registry_a_thread_of_this_module_sets():
    token = trio.lowlevel.current_trio_token()
    REGISTRY["mine"] = trio.Event()
    after(lambda: trio.from_thread.run_sync(REGISTRY["mine"].set, trio_token=token))
    await REGISTRY["mine"].wait()

async def test_a_registry_in_a_module_the_thread_names():
    token = trio.lowlevel.current_trio_token()
    helper.EVENTS["theirs"] = trio.Event()
    after(lambda: helper.kick("theirs", token))
    await helper.EVENTS["theirs"].wait()
"""

HELPER = """import trio

EVENTS = {}

def kick(name, token):
    trio.from_thread.run_sync(EVENTS[name].set, trio_token=token)
"""


@pytest.mark.slow
def test_the_same_primitives_released_later_pass(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_ok=WORKING, helper=HELPER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    result.assert_outcomes(passed=9)


BUSY = """import time
import trio

def busy():
    time.sleep(60)

async def test_a_task_behind_a_busy_thread():
    await trio.to_thread.run_sync(busy, abandon_on_cancel=True)
"""


def test_a_timeout_says_what_the_thread_of_a_to_thread_task_does(
    pytester: pytest.Pytester,
) -> None:
    out = _one_failure_within_2s(pytester, BUSY)
    assert "TimedOut: the test ran longer than 2s" in out, out
    assert re.search(r'waits in to_thread for thread "busy from .*", which runs', out), out
    assert re.search(r'in to_thread for thread "busy from .*", running at .*test_it.py:5 in '
                     r"busy: time.sleep\(60\)", out), out  # fmt: skip


UNENDING = """import threading
import trio

async def test_a_task_behind_a_thread_trio_cannot_cancel():
    await trio.to_thread.run_sync(threading.Event().wait)
"""


@pytest.mark.slow
def test_a_run_that_cannot_end_says_its_failure_on_stderr(pytester: pytest.Pytester) -> None:
    """trio cannot cancel a thread: the test never returns, so pytest never reports it. The
    failure is said on stderr instead, and the process is left to whoever runs it."""
    pytester.makeini(INI)
    path = pytester.makepyfile(test_it=UNENDING)
    err = pytester.path / "stderr.txt"
    with err.open("w") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(path)],
            cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # bounded polling: a child that never says it fails
        while "abandon_on_cancel" not in err.read_text() and child.poll() is None:
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    text = err.read_text()
    assert text.startswith("tether: this test's run cannot end; it failed with"), text
    assert "on threading.Event.wait: nothing that runs reaches it" in text, text
