"""Issue 42, part 1: the deadlock detector changes nothing a program does. Its analysis keeps no
object of the program alive once its verdict is in, so a sender (or a permit) a task drops
after sleeping past the cushion still closes the channel, as it does without the plugin; a
holder found in no task is looked at again after a garbage collection; and true deadlocks,
a stray clone in a task or in a global, are still named."""

from __future__ import annotations

import json
import re
import time

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
trio_mode = true
tether_deadlock = true
tether_deadlock_cushion = 1.0
tether_timeout = 30
"""


def run(pytester: pytest.Pytester, source: str, ini: str = INI, *args: str) -> pytest.RunResult:
    pytester.makeini(ini)
    pytester.makepyfile(test_it=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args, timeout=120)


CLONE_DROPPED = """
import trio, tether

async def hold(clone):
    await trio.sleep(2.5)   # past the cushion: the detector analyses the run meanwhile
    # returns without close(): dropping the last sender closes the channel

async def test_a_clone_dropped_after_sleeping_past_the_cushion():
    tx, rx = tether.channel(int, 4, name="c")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, tx.clone(), name="holder")
        tx.close()
        async for _ in rx:
            pass
"""


def test_a_clone_dropped_after_the_cushion_closes_the_channel(pytester: pytest.Pytester) -> None:
    result = run(pytester, CLONE_DROPPED)
    result.assert_outcomes(passed=1)
    assert "Deadlock" not in result.stdout.str()


IN_A_CYCLE = """
import gc, trio, tether

class Box:
    pass

async def drop_in_a_cycle(clone):
    box = Box()
    box.me, box.clone = box, clone   # garbage once this returns: only the collector frees it

async def test_a_clone_left_in_garbage():
    gc.disable()            # the program's own garbage stays until someone collects it
    try:
        tx, rx = tether.channel(int, 4, name="c")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drop_in_a_cycle, tx.clone(), name="dropper")
            tx.close()
            async for _ in rx:
                pass
    finally:
        gc.enable()
"""


def test_a_holder_in_garbage_is_collected_not_reported(pytester: pytest.Pytester) -> None:
    """The deadlock would be on a clone only uncollected garbage holds: the detector collects,
    the clone's finalizer closes the channel, and the loop ends."""
    result = run(pytester, IN_A_CYCLE)
    result.assert_outcomes(passed=1)
    assert "Deadlock" not in result.stdout.str()


PERMIT_DROPPED = """
import trio, tether

async def hold_a_permit(tx):
    permit = await tx.reserve()
    tx.close()              # the permit alone keeps the receiver's loop waiting
    await trio.sleep(2.5)   # past the cushion
    # returns with the permit unused: its finalizer gives the room back

async def test_a_permit_dropped_after_sleeping_past_the_cushion():
    tx, rx = tether.channel(int, 4, name="p")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_a_permit, tx.move(), name="holder")
        async for _ in rx:
            pass

async def hold_both(tx):
    permit = await tx.reserve()
    await trio.sleep(2.5)   # the sender and the permit are both dropped on return

async def test_a_permit_and_its_sender_dropped_after_the_cushion():
    tx, rx = tether.channel(int, 4, name="q")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_both, tx.move(), name="holder")
        async for _ in rx:
            pass
"""


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
def test_a_permit_dropped_after_the_cushion_ends_the_loop(pytester: pytest.Pytester) -> None:
    result = run(pytester, PERMIT_DROPPED)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "Deadlock" not in out
    assert "TimedOut" not in out


TRUE_DEADLOCKS = """
import trio, tether

async def keeper(stray, done):
    await done.wait()       # only the receiver below would set it

async def test_a_stray_clone_in_a_task():
    tx, rx = tether.channel(int, 4, name="c")
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper, tx.clone(), done, name="keeper")
        tx.close()
        async for _ in rx:
            pass
        done.set()

STRAY = []

async def test_a_stray_clone_in_a_global():
    tx, rx = tether.channel(int, 4, name="g")
    STRAY.append(tx.clone())
    tx.close()
    async for _ in rx:
        pass
"""


def test_true_deadlocks_on_a_stray_clone_are_still_named(pytester: pytest.Pytester) -> None:
    started = time.monotonic()
    result = run(pytester, TRUE_DEADLOCKS)
    took = time.monotonic() - started
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert re.search(r"on channel 'c': held by 'c' made at .*test_it.py:10 in task 'keeper'", out)
    assert re.search(
        r"on channel 'g': held by 'g' made at .*test_it.py:20 in no task \(a global, a thread", out
    ), out
    assert "TimedOut" not in out
    assert took < 25, f"{took:.1f}s: a deadlock is named in about a cushion, not at the timeout"


NOTHING_KEPT = """
import gc, weakref, trio

class Thing:
    pass

async def hold(thing, detector):
    with trio.fail_after(60):
        while detector.analyses == 0:   # analysed while it holds the thing
            await trio.sleep(0.05)

async def test_the_detector_keeps_nothing_alive(deadlock_detector):
    gc.disable()            # reference counting alone frees now: cyclic garbage would stay
    try:
        thing = Thing()
        gone = weakref.ref(thing)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold, thing, deadlock_detector)
            del thing
        assert gone() is None, "the task's object outlived it"
    finally:
        gc.enable()
"""


def test_an_analysis_keeps_no_object_of_the_program_alive(pytester: pytest.Pytester) -> None:
    result = run(pytester, NOTHING_KEPT)
    result.assert_outcomes(passed=1)


PROGRAMS = """
import json, trio, tether
from hypothesis import example, given, settings, strategies as st

# Each worker holds a clone for a delay straddling the cushion, then drops it: returns without
# close(), or closes it first.
WORKER = st.tuples(st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.5, 0.8]), st.booleans())

async def worker(clone, delay, close):
    await trio.sleep(delay)
    if close:
        clone.close()

@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(st.lists(WORKER, min_size=1, max_size=4))
@example([(0.8, False)])
@example([(0.5, False), (0.8, True), (0.1, False)])
async def test_program(workers):
    tx, rx = tether.channel(int, 4, name="c")
    async with trio.open_nursery() as nursery:
        for n, (delay, close) in enumerate(workers):
            nursery.start_soon(worker, tx.clone(), delay, close, name=f"worker{n}")
        tx.close()
        async for _ in rx:
            pass
    with open("outcomes.jsonl", "a") as out:
        out.write(json.dumps([workers, "the loop ended"]) + "\\n")
"""

PLAIN_INI = "[pytest]\ntrio_mode = true\n"


def outcomes(pytester: pytest.Pytester, ini: str, *args: str) -> list[object]:
    """Each generated program and how it ended, in the order Hypothesis ran them."""
    record = pytester.path / "outcomes.jsonl"
    record.unlink(missing_ok=True)
    result = run(pytester, PROGRAMS, ini, *args)
    result.assert_outcomes(passed=1)
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.slow  # two child runs of 14 programs each: ~16 s on 2 cores
def test_dropping_clones_ends_the_loop_with_the_plugin_as_without(
    pytester: pytest.Pytester,
) -> None:
    """Hypothesis, in the child, runs the same small programs (derandomized) with the plugin
    off and on: N workers each drop a clone after a delay straddling the cushion, and the
    receiver's loop ends in every one of them, both times."""
    on_ini = INI.replace("cushion = 1.0", "cushion = 0.25")
    without = outcomes(pytester, PLAIN_INI, "-p", "no:tether")
    with_plugin = outcomes(pytester, on_ini)
    assert len(without) >= 12
    assert with_plugin == without
