"""tether.testing's pytest plugin, run through ``pytester`` in a subprocess: a deadlocked trio
test fails in about a cushion with every task's line and the holders of its channel; healthy
tests and every no-false-positive case pass; the hard timeout fires; the leak guard names and
kills what a test left behind."""

from __future__ import annotations

import re
import time

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
trio_mode = true
tether_deadlock = true
tether_deadlock_cushion = 0.3
"""


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_it=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args, timeout=60)


SEED = """
import trio, tether

async def engine(commands):
    async for command in commands:
        pass

async def test_main_keeps_a_clone():
    tx, rx = tether.channel(str, 16, name="commands")
    forgotten = tx.clone()                     # the seed bug: main keeps a clone
    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine, rx, name="engine")
        await tx.send("prompt")
        tx.close()                             # the engine never sees the channel close
"""


def test_the_seed_deadlock_fails_in_a_cushion_naming_the_clone(pytester: pytest.Pytester) -> None:
    started = time.monotonic()
    result = run(pytester, SEED)
    took = time.monotonic() - started
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Deadlock: all tasks are asleep" in out
    assert re.search(r"task 'engine' waits at .*test_it.py:4 in engine: async for command", out)
    assert re.search(
        r"on channel 'commands': held by 'commands' made at .*test_it.py:9 in task", out
    ), out
    assert took < 15, f"{took:.1f}s"


HEALTHY = """
import os, socket, subprocess, sys, trio, trio.testing, tether

async def test_a_healthy_channel_test():
    tx, rx = tether.channel(int, 1, name="ok")
    async with trio.open_nursery() as nursery:
        async def produce(tx=tx.move()):
            with tx:
                for n in range(3):
                    await tx.send(n)
        nursery.start_soon(produce)
        assert [n async for n in rx] == [0, 1, 2]

async def test_waiting_on_a_socket_is_not_a_deadlock():
    a, b = trio.socket.socketpair()
    async def later():
        await trio.to_thread.run_sync(lambda: __import__("time").sleep(0.6))
        await b.send(b"x")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        assert await a.recv(1) == b"x"

async def test_waiting_on_a_child_process_is_not_a_deadlock():
    await trio.run_process([sys.executable, "-c", "import time; time.sleep(0.6)"])

async def test_waiting_on_a_thread_is_not_a_deadlock():
    await trio.to_thread.run_sync(lambda: __import__("time").sleep(0.6))

async def test_a_pending_timeout_is_not_a_deadlock():
    with trio.move_on_after(0.6):
        await trio.Event().wait()

async def test_an_autojump_clock_makes_deadlines_come(autojump_clock):
    with trio.move_on_after(3600):
        await trio.Event().wait()

async def test_wait_all_tasks_blocked_is_not_a_deadlock():
    await trio.testing.wait_all_tasks_blocked(0.6)
"""


def test_no_false_positives(pytester: pytest.Pytester) -> None:
    result = run(pytester, HEALTHY)
    result.assert_outcomes(passed=7)


FROZEN = """
import trio, trio.testing, pytest

@pytest.fixture
def clock():
    return trio.testing.MockClock()           # never advances: its deadlines never come

async def test_a_frozen_mock_clock_deadline_is_a_deadlock(clock):
    await trio.sleep(10)
"""


def test_a_deadline_that_cannot_come_is_a_deadlock(pytester: pytest.Pytester) -> None:
    result = run(pytester, FROZEN)
    result.assert_outcomes(failed=1)
    assert "Deadlock: all tasks are asleep" in result.stdout.str()


MARKED = """
import trio, pytest

@pytest.mark.deadlock_check
async def test_marked():
    await trio.Event().wait()

async def test_with_the_fixture(deadlock_detector):
    deadlock_detector.cushion = 0.2
    await trio.Event().wait()

@pytest.mark.no_deadlock_check
async def test_opted_out_with_a_timeout():
    await trio.Event().wait()
"""


def test_the_marker_and_the_fixture_turn_it_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\ntether_timeout = 2\n")
    pytester.makepyfile(test_it=MARKED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=60)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    # Count the failure sections only: how much of each message the short
    # summary repeats depends on the terminal's width.
    raised = re.findall(r"^E\s+\S*Deadlock: all tasks are asleep", out, re.MULTILINE)
    assert len(raised) == 2, out
    assert "TimedOut: the test ran longer than 2s" in out
    assert re.search(
        r"task [\"'].*test_opted_out_with_a_timeout.*[\"'] waits at .*test_it.py:13", out
    )


TIMEOUT = """
import trio

async def test_too_long():
    await trio.sleep(30)
"""


def test_the_hard_timeout_fails_a_long_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\ntether_timeout = 1\n")
    pytester.makepyfile(test_it=TIMEOUT)
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=60)
    result.assert_outcomes(failed=1)
    assert "TimedOut: the test ran longer than 1s" in result.stdout.str()
    assert "test_it.py:4 in test_too_long: await trio.sleep(30)" in result.stdout.str()
    assert time.monotonic() - started < 20


LEAK = """
import subprocess

def test_leaks_a_sleeper():
    subprocess.Popen(["setsid", "sleep", "300"])

def test_clean():
    subprocess.run(["true"], check=True)
"""


def test_the_leak_guard_names_and_kills_what_a_test_left(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntether_process_leaks = true\n")
    pytester.makepyfile(test_it=LEAK)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=60)
    result.assert_outcomes(passed=2, errors=1)
    out = result.stdout.str()
    assert "test_it.py::test_leaks_a_sleeper left 1 processes behind (killed and reaped)" in out
    assert re.search(r"pid=\d+ status=\w+ cmd=sleep 300", out)


def test_the_plugin_costs_pytest_start_up_almost_nothing() -> None:
    """Every install registers the plugin, so loading it must cost next to nothing until an
    ini option turns it on: under 30 ms of imports beyond pytest's own (it is about 2)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = "import pytest; import tether.testing._plugin"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)  # bytecode caches
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    (line,) = [row for row in done.stderr.splitlines() if row.endswith("| tether.testing._plugin")]
    cumulative_us = int(line.split("|")[1])
    assert cumulative_us < 30_000, line
    loaded = [row.rsplit("|", 1)[1].strip() for row in done.stderr.splitlines() if "|" in row]
    assert "trio" not in loaded
    assert "tether.journal" not in loaded


PLAIN = """
import sys

def test_plain():
    assert True

def test_sync_trio_run():
    import trio
    trio.run(trio.sleep, 0)
"""

MODULES = """
import sys

def pytest_sessionfinish(session):
    loaded = sorted(m for m in sys.modules if m.startswith("tether.testing."))
    print("tether modules:", ",".join(loaded), file=sys.stderr)
"""


def test_a_project_that_never_turns_the_plugin_on_pays_nothing_for_the_detector(
    pytester: pytest.Pytester,
) -> None:
    """Issue 43, row 9: a plain sync test does not import the detector (88 ms with what it pulls
    in); a test that starts a trio run does, at that run's start (the hard timeout is on)."""
    pytester.makeconftest(MODULES)
    pytester.makepyfile(test_it=PLAIN)
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-k", "plain", timeout=60)
    plain.assert_outcomes(passed=1)
    assert "tether.testing._deadlock" not in plain.stderr.str()
    assert "tether.testing._verdict" not in plain.stderr.str()
    both = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=60)
    both.assert_outcomes(passed=2)
    assert "tether.testing._deadlock" in both.stderr.str()
