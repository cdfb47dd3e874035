"""The deadlock detector on the programs that defeat a detector which only sees a fully idle
run, run through ``pytester``: partial deadlocks beside running, sleeping and listening tasks,
the autojump clock, and every way trio runs under pytest (pytest-trio, ``trio_test``, a sync
``trio.run``, anyio's trio backend); and the correct programs woken from outside the run's
tasks, which must pass."""

from __future__ import annotations

import re

import pytest

from test_testing_plugin import INI as PLUGIN_INI

pytest_plugins = ["pytester"]

INI = PLUGIN_INI + "tether_timeout = 30\n"

DEADLOCKS = """import functools, os, signal, socket, sys, threading, time
import pytest, trio, trio.testing, tether

async def keepalive():
    while True:
        await trio.sleep(0.5)

async def test_partial_beside_a_keepalive():
    s1, r1 = trio.open_memory_channel(0)
    s2, r2 = trio.open_memory_channel(0)
    async def a():
        await r2.receive()
        await s1.send(1)
    async def b():
        await r1.receive()
        await s2.send(2)
    async with trio.open_nursery() as n:
        n.start_soon(keepalive, name="keepalive")
        n.start_soon(a, name="a")
        n.start_soon(b, name="b")

async def test_event_never_set_while_serving():
    async def handler(stream):
        await stream.aclose()
    async with trio.open_nursery() as n:
        await n.start(trio.serve_tcp, handler, 0)
        never = trio.Event()
        await never.wait()

async def sleeper(tx):
    await trio.sleep(3600)

async def test_clone_held_by_a_sleeping_task():
    tx, rx = tether.channel(int, 1, name="work")
    async with trio.open_nursery() as n:
        n.start_soon(sleeper, tx.move(), name="sleeper")
        async for item in rx:
            pass

async def test_deadlock_under_autojump(autojump_clock):
    await trio.Event().wait()

async def test_partial_under_autojump(autojump_clock):
    async with trio.open_nursery() as n:
        n.start_soon(keepalive, name="keepalive")
        await trio.Event().wait()

async def test_abba_beside_a_keepalive():
    A, B = trio.Lock(), trio.Lock()
    async def one():
        async with A:
            await trio.sleep(0.1)
            async with B: pass
    async def two():
        async with B:
            await trio.sleep(0.1)
            async with A: pass
    async with trio.open_nursery() as n:
        n.start_soon(keepalive, name="keepalive")
        n.start_soon(one, name="one")
        n.start_soon(two, name="two")

@trio.testing.trio_test
async def test_with_trio_test():
    await trio.Event().wait()

def test_sync_calling_trio_run():
    async def main():
        await trio.Event().wait()
    trio.run(main)

@pytest.mark.anyio
async def test_anyio_trio_backend():
    await trio.Event().wait()

@pytest.fixture
def anyio_backend():
    return "trio"
"""


def _durations(out: str) -> dict[str, float]:
    found = re.findall(r"^([\d.]+)s call\s+\S+::(\w+)", out, re.MULTILINE)
    return {name: float(seconds) for seconds, name in found}


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
def test_every_deadlock_is_named_within_seconds(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_dead=DEADLOCKS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "anyio", "-q", "--durations=0", "-vv", timeout=240
    )
    out = result.stdout.str()
    result.assert_outcomes(failed=9)
    assert out.count("Deadlock: ") >= 9, out
    assert "TimedOut" not in out
    # Named within the cushion and a second on a quiet machine (benchmarks/testing_overhead.py
    # measures it); the bound here leaves room for a loaded CI machine.
    durations = _durations(out)
    assert len(durations) == 9, out
    assert max(durations.values()) < 10, durations
    # Partial ones say what still runs; the holder of a lock or a sender is the one now.
    assert "still running, unable to reach them: task 'keepalive'" in out
    assert re.search(r"task 'two' waits at .*async with A: pass\n\s+on <locked Lock .*owned "
                     r"by task 'one'", out)  # fmt: skip
    assert re.search(r"on channel 'work': held by 'work' made at .*test_dead.py:\d+ in task "
                     r"'sleeper'", out)  # fmt: skip
    assert "_serve_one_listener" in out
    assert re.search(r"task 'a' waits at .*await r2.receive\(\)\n\s+on a memory channel "
                     r"\(receive\): open sender held by tasks? .*'b'", out), out  # fmt: skip


FALSE_ALARMS = """import os, signal, socket, subprocess, sys, threading, time
import pytest, trio, trio.testing, tether

DELAY = 1.0   # over three cushions

async def test_a_raw_thread_with_the_token():
    ev = trio.Event()
    token = trio.lowlevel.current_trio_token()
    def later():
        time.sleep(DELAY)
        token.run_sync_soon(ev.set)
    threading.Thread(target=later, daemon=True).start()
    await ev.wait()

async def test_a_raw_thread_using_from_thread():
    ev = trio.Event()
    token = trio.lowlevel.current_trio_token()
    def later():
        time.sleep(DELAY)
        trio.from_thread.run_sync(ev.set, trio_token=token)
    threading.Thread(target=later, daemon=True).start()
    await ev.wait()

async def test_start_thread_soon():
    ev = trio.Event()
    token = trio.lowlevel.current_trio_token()
    def deliver(outcome):
        token.run_sync_soon(ev.set)
    trio.lowlevel.start_thread_soon(lambda: time.sleep(DELAY), deliver)
    await ev.wait()

async def test_a_python_signal_handler():
    ev = trio.Event()
    token = trio.lowlevel.current_trio_token()
    old = signal.signal(signal.SIGUSR1, lambda *_: token.run_sync_soon(ev.set))
    try:
        killer = subprocess.Popen(["sh", "-c", f"sleep {DELAY}; kill -USR1 {os.getpid()}"])
        await ev.wait()
        killer.wait()
    finally:
        signal.signal(signal.SIGUSR1, old)

async def test_a_clock_jumped_from_another_thread(mock_clock):
    token = trio.lowlevel.current_trio_token()
    def jumper():
        time.sleep(DELAY)
        mock_clock.jump(10)
        token.run_sync_soon(lambda: None)
    threading.Thread(target=jumper, daemon=True).start()
    await trio.sleep(5)

def test_io_awaited_inside_an_async_generator():
    raw, b = socket.socketpair()
    async def main():
        a = trio.socket.from_stdlib_socket(raw)
        async def replies():
            yield await a.recv(1)
        async for reply in replies():
            assert reply == b"x"
        a.close()
    script = f"import os, time; time.sleep({DELAY}); os.write({b.fileno()}, b'x')"
    writer = subprocess.Popen([sys.executable, "-c", script], pass_fds=[b.fileno()])  # not us
    b.close()
    trio.run(main)
    writer.wait()

async def test_a_task_that_cancels_the_waiter_later():
    async with trio.open_nursery() as n:
        n.start_soon(trio.sleep_forever, name="server")
        await trio.sleep(DELAY)
        n.cancel_scope.cancel()

async def test_a_keepalive_that_sets_it_later():
    ev = trio.Event()
    async def setter():
        for _ in range(3):
            await trio.sleep(DELAY / 3)
        ev.set()
    async with trio.open_nursery() as n:
        n.start_soon(setter)
        await ev.wait()

async def test_a_lock_owner_that_sleeps_then_releases():
    lock = trio.Lock()
    async def holder(task_status):
        async with lock:
            task_status.started()
            await trio.sleep(DELAY)
    async with trio.open_nursery() as n:
        await n.start(holder)
        async with lock:
            pass

async def test_a_global_event_set_by_a_running_task():
    async def setter():
        await trio.sleep(DELAY)
        GLOBAL.set()
    async with trio.open_nursery() as n:
        n.start_soon(setter)
        await GLOBAL.wait()

GLOBAL = trio.Event()

async def test_a_sender_in_a_list_held_by_a_sleeping_worker():
    tx, rx = tether.channel(int, 1, name="jobs")
    async def worker(box):
        await trio.sleep(DELAY)
        async with box[0]:
            await box[0].send(1)
    async with trio.open_nursery() as n:
        n.start_soon(worker, [tx.move()])
        assert [x async for x in rx] == [1]

async def test_memory_channel_with_a_slow_producer():
    s, r = trio.open_memory_channel(0)
    async def produce():
        async with s:
            await trio.sleep(DELAY)
            await s.send(1)
    async with trio.open_nursery() as n:
        n.start_soon(produce)
        async with r:
            assert [x async for x in r] == [1]

async def test_wait_all_tasks_blocked_with_a_big_cushion():
    await trio.testing.wait_all_tasks_blocked(DELAY)

async def test_an_autojump_sleep_loop(autojump_clock):
    for _ in range(100):
        await trio.sleep(1)

def test_sync_trio_run_ok():
    async def main():
        await trio.sleep(DELAY)
    trio.run(main)

@trio.testing.trio_test
async def test_trio_test_ok():
    await trio.to_thread.run_sync(time.sleep, DELAY)

async def test_a_condition_notified_later():
    cond = trio.Condition()
    async def notifier():
        await trio.sleep(DELAY)
        async with cond:
            cond.notify_all()
    async with trio.open_nursery() as n:
        n.start_soon(notifier)
        async with cond:
            await cond.wait()

async def test_a_semaphore_released_by_a_thread():
    sem = trio.Semaphore(0)
    token = trio.lowlevel.current_trio_token()
    def later():
        time.sleep(DELAY)
        token.run_sync_soon(sem.release)
    threading.Thread(target=later, daemon=True).start()
    await sem.acquire()
"""


@pytest.mark.slow
def test_programs_woken_from_outside_the_tasks_pass(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_ok=FALSE_ALARMS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    result.assert_outcomes(passed=18)


KEPT_OPEN = """
import trio

async def test_an_event_a_running_task_could_set():
    never = trio.Event()
    async def keeper():
        while True:
            await trio.sleep(0.2)
            never.is_set()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper, name="keeper")
        await never.wait()
"""


def _one_failure_within_2s(pytester: pytest.Pytester, program: str) -> str:
    """Run ``program`` as the only test, with a 2 s ``tether_timeout``; its output, once it
    failed."""
    pytester.makeini(INI.replace("tether_timeout = 30", "tether_timeout = 2"))
    pytester.makepyfile(test_it=program)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=120)
    result.assert_outcomes(failed=1)
    return result.stdout.str()


def test_a_timeout_says_which_wake_source_kept_it_open(pytester: pytest.Pytester) -> None:
    out = _one_failure_within_2s(pytester, KEPT_OPEN)
    assert "TimedOut: the test ran longer than 2s" in out
    assert re.search(
        r"no deadlock was declared: task .+? waits on an Event that running code can reach", out
    ), out


DEFAULTS = """
import trio

def test_the_default_timeout(request):
    assert request.config.getini("tether_timeout") == "300"

async def test_a_trio_test():
    await trio.sleep(0)
"""

UNKNOWN_TRIO = """
def pytest_configure(config):
    import tether.testing._deadlock as deadlock
    deadlock.KNOWS_TRIO = False
"""


def test_an_unknown_trio_layout_is_said_once_and_the_timeout_stays(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\ntether_deadlock = true\n")
    pytester.makeconftest(UNKNOWN_TRIO)
    pytester.makepyfile(test_it=DEFAULTS + "\nasync def test_another():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rw", timeout=120)
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert out.count("does not know this trio's layout") == 1, out


NO_TRIO = """
import sys

def test_one():
    pass

def test_the_plugin_did_not_bring_trio():
    assert "trio" not in sys.modules
    assert "tether.testing._deadlock" not in sys.modules
"""


def test_a_project_without_trio_pays_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_it=NO_TRIO)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:trio", "-p", "no:anyio", "-q", timeout=120
    )
    result.assert_outcomes(passed=2)


PAST_THE_TIMEOUT = """
import trio

async def test_a_sleep_longer_than_the_timeout():
    await trio.sleep(5)
"""


def test_a_sleep_past_the_timeout_is_a_timeout_not_a_deadlock(pytester: pytest.Pytester) -> None:
    out = _one_failure_within_2s(pytester, PAST_THE_TIMEOUT)
    assert "Deadlock" not in out
    assert "only sleep until a deadline past the test's timeout" in out, out
