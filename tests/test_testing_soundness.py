"""Issue 31: the deadlock plugin never fails a working test. Working programs whose wake-up
comes from a busy task, a thread pool, a queue-fed worker, a weak callback registry or a weak
proxy pass every run; a thread parked in ``trio.from_thread`` is no waker, so that deadlock is
named; anyio's own plugin on its trio backend is watched; a report of thousands of tasks stays
small and names the test's own line; and a seeded negative control passes."""

from __future__ import annotations

import os
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from torture import control

pytest_plugins = ["pytester"]

INI = """
[pytest]
trio_mode = true
tether_deadlock = true
tether_deadlock_cushion = 0.1
tether_timeout = 30
"""

RUNS = int(os.environ.get("TETHER_SOUNDNESS_RUNS", "2"))
"""Runs of each working program (``make torture``: 20)."""

WORKING = (
    control.HEADER
    + """

DELAY = 0.8   # eight cushions

@pytest.fixture(params=range(RUNS))
def run(request):
    return request.param

@pytest.mark.parametrize("waiters", [20, 200, 2000])
async def test_a_busy_loop_beside_waiters(run, waiters):
    done = trio.Event()
    async def busy():
        deadline = trio.current_time() + DELAY
        while trio.current_time() < deadline:
            await trio.sleep(0)
        done.set()
    async with trio.open_nursery() as n:
        for _ in range(waiters):
            n.start_soon(done.wait)
        n.start_soon(busy)

async def test_a_thread_pool_job(run):
    token = trio.lowlevel.current_trio_token()
    def job(event):
        time.sleep(DELAY)
        trio.from_thread.run_sync(event.set, trio_token=token)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        event = trio.Event()
        pool.submit(job, event)
        await event.wait()
    finally:
        pool.shutdown(wait=False)

async def test_a_worker_fed_by_a_queue(run):
    token = trio.lowlevel.current_trio_token()
    jobs = queue.Queue()
    def worker():
        item = jobs.get()
        time.sleep(DELAY)
        token.run_sync_soon(item.set)
    threading.Thread(target=worker, daemon=True).start()
    event = trio.Event()
    jobs.put(event)
    await event.wait()

class Waiter:
    def __init__(self, token):
        self.event = trio.Event()
        self.token = token
    def on_fire(self):
        self.token.run_sync_soon(self.event.set)

async def test_a_weak_method_registry(run):
    registry = Registry()
    waiter = Waiter(trio.lowlevel.current_trio_token())
    registry.register(waiter.on_fire)
    def later(registry):
        time.sleep(DELAY)
        registry.fire()
    threading.Thread(target=later, args=(registry,), daemon=True).start()
    del registry
    await waiter.event.wait()

async def test_a_weak_proxy_held_by_a_thread(run):
    waiter = Waiter(trio.lowlevel.current_trio_token())
    def later(proxy):
        time.sleep(DELAY)
        proxy.on_fire()
    threading.Thread(target=later, args=(weakref.proxy(waiter),), daemon=True).start()
    await waiter.event.wait()
"""
)


@pytest.mark.slow
def test_working_programs_woken_from_outside_pass_every_run(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_ok=WORKING.replace("range(RUNS)", f"range({RUNS})"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=600)
    result.assert_outcomes(passed=7 * RUNS)


PARKED = """import trio

async def test_a_worker_parked_in_from_thread_on_an_event_nobody_sets():
    event = trio.Event()
    await trio.to_thread.run_sync(lambda: trio.from_thread.run(event.wait))
"""


def test_a_thread_parked_in_from_thread_is_no_waker(pytester: pytest.Pytester) -> None:
    """The worker waits for the trio side, which waits for the worker: named, not timed out
    (within cushion + 1 s on a quiet machine; the bound leaves room for a loaded one)."""
    pytester.makeini(INI)
    pytester.makepyfile(test_parked=PARKED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "--durations=0",
                                           timeout=120)  # fmt: skip
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "Deadlock: all tasks are asleep" in out, out
    assert "test_parked.py:5 in test_a_worker_parked" in out
    seconds = float(re.findall(r"^([\d.]+)s call", out, re.MULTILINE)[0])
    assert seconds < 10, out


ANYIO = """import anyio, pytest

@pytest.fixture(params=["trio", ("trio", {})])
def anyio_backend(request):
    return request.param

@pytest.mark.anyio
async def test_stuck_on_an_anyio_event():
    await anyio.Event().wait()

@pytest.mark.anyio
async def test_sleeps_past_the_timeout():
    await anyio.sleep(30)

@pytest.mark.anyio
async def test_works():
    event = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(event.wait)
        await anyio.sleep(0.5)
        event.set()
"""


@pytest.mark.slow
def test_anyio_s_own_plugin_on_trio_is_watched(pytester: pytest.Pytester) -> None:
    """Without pytest-trio's ``trio_mode``: anyio imports trio only inside the test's call,
    and runs it in a guest run that outlives the test."""
    pytester.makeini("[pytest]\ntether_deadlock = true\ntether_deadlock_cushion = 0.1\n"
                     "tether_timeout = 3\n")  # fmt: skip
    pytester.makepyfile(test_anyio=ANYIO)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "anyio", "-p",
                                           "no:trio", "-q", f"--junitxml={junit}",
                                           timeout=120)  # fmt: skip
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=4)
    # How often a message is printed depends on the pytest and anyio versions (anyio 4.12+
    # re-raises a captured error, so its source is shown twice); junit has one per test.
    failures = {
        case.get("name"): failure.get("message", "")
        for case in ElementTree.parse(junit).iter("testcase")
        for failure in case.iter("failure")
    }
    assert len(failures) == 4, failures
    for name, message in failures.items():
        expected = "Deadlock: all tasks" if "stuck" in str(name) else "TimedOut: the test ran"
        assert expected in message, (name, message)
    assert "test_anyio.py:9 in test_stuck_on_an_anyio_event" in out
    assert "test_anyio.py:13 in test_sleeps_past_the_timeout" in out


MANY = """import trio

async def worker(event):
    await event.wait()

async def test_two_thousand_workers_deadlocked():
    event = trio.Event()
    async with trio.open_nursery() as n:
        for _ in range(2000):
            n.start_soon(worker, event, name="worker")
"""


def test_a_report_of_thousands_of_tasks_is_grouped(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_many=MANY)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q",
                                           f"--junitxml={junit}", timeout=120)  # fmt: skip
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "2000 tasks ('worker' (x2000)) wait at test_many.py:4 in worker" in out, out
    assert "for its nursery's children: 'worker' (x2000)" in out
    assert len(out) < 20_000
    assert junit.stat().st_size < 20_000


@pytest.mark.slow
def test_a_seeded_negative_control_raises_no_false_alarm(tmp_path: Path) -> None:
    """A slice of ``make torture``'s generated working programs (tests/torture/control.py)."""
    seed = int(os.environ.get("TETHER_CONTROL_SEED", "1"))
    done = control.run(seed, 12, tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "12 passed" in done.stdout
