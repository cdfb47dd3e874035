"""Deadlock reports list every stuck task with its wait and name what each holder holds
(issue 42 part 3): a task started on a library primitive is listed at that primitive, never at
a wrapper's line; two tasks of one function are told apart; a receiver kept open only by an
unsent ``Permit`` is named as such, and the same Permit sent later passes."""

from __future__ import annotations

import re

import pytest

from test_testing_deadlocks import INI

pytest_plugins = ["pytester"]

PROGRAMS = """import threading
import anyio, trio, tether

async def test_tasks_started_on_library_primitives():
    lot = trio.lowlevel.ParkingLot()
    async with trio.open_nursery() as n:
        n.start_soon(lot.park)
        n.start_soon(trio.Event().wait)

async def test_a_from_thread_call_of_a_library_function():
    never = trio.Event()
    token = trio.lowlevel.current_trio_token()
    def worker():
        try:
            trio.from_thread.run(never.wait, trio_token=token)
        except trio.Cancelled:
            pass
    threading.Thread(target=worker, daemon=True).start()
    await trio.Event().wait()

async def test_an_anyio_lock_cycle_of_one_function():
    a, b = anyio.Lock(), anyio.Lock()
    async def one(x, y):
        async with x:
            await anyio.sleep(0.1)
            async with y:
                pass
    async with anyio.create_task_group() as tg:
        tg.start_soon(one, a, b)
        tg.start_soon(one, b, a)

async def test_a_receiver_kept_open_by_an_unsent_permit():
    tx, rx = tether.channel(int, 1, name="work")
    box = []
    async def reserver(tx):
        box.append(await tx.reserve())
        tx.close()
        await trio.Event().wait()
    async with trio.open_nursery() as n:
        n.start_soon(reserver, tx.move(), name="reserver")
        async for _ in rx:
            pass

async def test_ok_a_permit_sent_later():
    tx, rx = tether.channel(int, 1, name="work")
    async def reserver(tx):
        permit = await tx.reserve()
        tx.close()
        await trio.sleep(1.0)
        permit.send(1)
    async with trio.open_nursery() as n:
        n.start_soon(reserver, tx.move(), name="reserver")
        assert [item async for item in rx] == [1]
"""


def test_every_stuck_task_is_listed_and_every_holder_named(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_reports=PROGRAMS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    out = re.sub(r"0x[0-9a-f]+", "0x...", result.stdout.str())
    result.assert_outcomes(failed=4, passed=1)
    assert "TimedOut" not in out, out
    assert re.search(r"task 'ParkingLot.park' waits at .*_parking_lot.py:\d+ in park", out), out
    assert re.search(r"task 'Event.wait' waits at .*_sync.py:\d+ in wait", out), out
    assert "outcome" not in out, out
    cycle = r"task 'one#1' waits at .* in one: async with y:\n\s+on <locked Lock .*by task 'one#2'"
    assert re.search(cycle, out), out
    assert re.search(r"task 'one#2' waits at .*\n\s+on .*owned by task 'one#1'", out), out
    assert re.search(r"on channel 'work': an unsent Permit is held by tasks .*'reserver'", out)


ANYIO_STREAMS = """import anyio, pytest

pytestmark = pytest.mark.anyio

@pytest.fixture
def anyio_backend():
    return "trio"

async def test_an_anyio_stream_nobody_sends_on():
    send, receive = anyio.create_memory_object_stream(0)
    async def hold(send):
        await anyio.Event().wait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, send)
        await receive.receive()

async def test_an_anyio_stream_nobody_receives_from():
    send, receive = anyio.create_memory_object_stream(0)
    kept = [receive]
    await send.send(1)

async def test_ok_an_anyio_stream_sent_on_later():
    send, receive = anyio.create_memory_object_stream(0)
    async def later():
        await anyio.sleep(1.0)
        await send.send(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        assert await receive.receive() == 1
"""


def test_anyio_streams_under_anyio_s_own_plugin_name_the_stream_and_the_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI.replace("trio_mode = true\n", ""))
    pytester.makepyfile(test_streams=ANYIO_STREAMS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    out = result.stdout.str()
    result.assert_outcomes(failed=2, passed=1)
    assert "TimedOut" not in out, out
    assert "task 'TestRunner" not in out, out
    # anyio's runner shows the failure inside its traceback: each report line after an "E".
    assert re.search(r"task \"<test 'test_an_anyio_stream_nobody_sends_on'>\" waits at .*"
                     r"await receive.receive\(\)\n[E ]+on an anyio memory object stream \(re"
                     r"ceive\): open sender held by tasks .*'hold'", out), out  # fmt: skip
    receiver = r"\(send\): open receiver held by task \"<test 'test_an_anyio_stream_nobody_rec"
    assert re.search(receiver, out), out


SYSTEM_TASKS = """import math
import trio

async def until_the_run_ends():
    await trio.sleep(math.inf)  # trio cancels its system nursery when the main task ends

async def test_ok_a_system_task_sleeping_until_the_run_ends():
    trio.lowlevel.spawn_system_task(until_the_run_ends)
    await trio.sleep(1.5)

async def test_a_deadlock_beside_a_system_task():
    trio.lowlevel.spawn_system_task(until_the_run_ends)
    await trio.Event().wait()
"""


def test_a_system_task_sleeping_until_the_run_ends_is_no_deadlock(
    pytester: pytest.Pytester,
) -> None:
    """trio cancels its system tasks when the main task ends: while that task can run (the
    test sleeps past a cushion), a library's system task sleeping until then is no deadlock
    (it was called one, found under anyio's ``to_process`` by running anyio's own suite)."""
    pytester.makeini(INI)
    pytester.makepyfile(test_system=SYSTEM_TASKS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    out = result.stdout.str()
    result.assert_outcomes(failed=1, passed=1)
    assert re.search(r"task \"<test 'test_a_deadlock_beside_a_system_task'>\" waits at .*"
                     r"await trio.Event\(\).wait\(\)", out), out  # fmt: skip
