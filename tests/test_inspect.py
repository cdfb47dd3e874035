"""Issue 33, in process: ``tether.inspect.snapshot()`` names every task's line of user code and
what it waits on (a channel with the file:line of each sender that holds it open, a lock and
its owner, a sleep and its deadline, a subprocess), groups identical waits so 10,000 tasks
make a few entries, bounds its entries, keeps a failing section to itself, and installs no
signal handler."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
import trio.testing

import tether
from tether.inspect import add_section, render, snapshot


def entry(snap: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in snap["tasks"] if name in t["names"]]
    return found


async def test_each_wait_is_named_with_its_line_and_object() -> None:
    tx, rx = tether.channel(int, 4, name="jobs")
    lock = trio.Lock()
    holding = trio.Event()
    stray_made = trio.Event()

    async def stray_keeper() -> None:
        stray = tx.clone()  # the stray clone: seed 004's shape
        stray_made.set()
        try:
            await trio.sleep_forever()
        finally:
            stray.close()

    async def consumer() -> None:
        await rx.recv()

    async def holder() -> None:
        async with lock:
            holding.set()
            await trio.sleep(100)

    async def wanter() -> None:
        async with lock:
            pass

    async def child() -> None:
        await trio.run_process([sys.executable, "-c", "import time; time.sleep(30)"])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stray_keeper, name="stray keeper")
        await stray_made.wait()
        tx.close()
        nursery.start_soon(consumer, name="consumer")
        nursery.start_soon(holder, name="holder")
        await holding.wait()
        nursery.start_soon(wanter, name="wanter")
        nursery.start_soon(child, name="child")
        await trio.testing.wait_all_tasks_blocked(0.2)
        snap = snapshot()
        nursery.cancel_scope.cancel()
    rx.close()

    consumer_entry = entry(snap, "consumer")
    assert consumer_entry["where"]["file"].endswith("test_inspect.py")
    assert consumer_entry["where"]["source"] == "await rx.recv()"
    wait = consumer_entry["wait"]
    assert (wait["kind"], wait["channel"], wait["queued"], wait["capacity"]) == (
        "tether_receive", "jobs", 0, 4,
    )  # fmt: skip
    (held,) = wait["holders"]
    assert held["task"] == "stray keeper"
    path, _, line = held["site"].rpartition(":")
    assert path.endswith("test_inspect.py")
    assert "tx.clone()" in Path(__file__).read_text().splitlines()[int(line) - 1]
    assert entry(snap, "wanter")["wait"] == {"kind": "lock", "on": "a Lock", "owner": "holder"}
    sleep = entry(snap, "holder")["wait"]
    assert sleep["kind"] == "sleep"
    assert 90 < sleep["deadline_in"] <= 100
    process = entry(snap, "child")["wait"]
    assert process["kind"] == "subprocess"
    assert isinstance(process["pid"], int)
    assert entry(snap, "stray keeper")["where"]["source"] == "await trio.sleep_forever()"
    (me,) = [t for t in snap["tasks"] if t["wait"]["kind"] == "running"]
    assert me["name"] == trio.lowlevel.current_task().name
    # The tree: every task hangs under its parent's entry.
    ids = {t["id"] for t in snap["tasks"]}
    assert all(t["parent"] in ids for t in snap["tasks"] if t["parent"] is not None)
    text = render(snap)
    assert "held open by 'jobs' made at " in text
    assert "by task 'stray keeper'" in text
    assert "on a Lock (owned by task 'holder')" in text
    json.dumps(snap, allow_nan=False)  # a program can read it


ROOMY = 60.0
"""A time budget no loaded 2-core host reaches (the default is a frame's worth: under load
10,000 tasks were cut at 9,466)."""


async def test_ten_thousand_identical_waits_are_one_entry_and_entries_are_bounded() -> None:
    async def worker(event: trio.Event) -> None:
        await event.wait()

    async def pool(count: int, name: str) -> None:
        event = trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(worker, event, name=f"{name}-{i}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool, 10_000, "worker", name="pool")
        await trio.testing.wait_all_tasks_blocked()
        snap = snapshot(time_budget=ROOMY)  # grouping is tested here, not the time budget
        (workers,) = [t for t in snap["tasks"] if t["names"][0].startswith("worker-")]
        assert workers["count"] == 10_000
        assert workers["names"] == ["worker-0", "worker-1", "worker-2"]
        assert snap["task_count"] >= 10_003
        assert len(snap["tasks"]) < 10
        assert "10000 tasks ('worker-0', 'worker-1', 'worker-2' and 9997 more) wait" in render(snap)
        # Distinct lines are distinct entries, and past the bound they are counted only.
        for i in range(30):
            nursery.start_soon(trio.sleep, 1000 + i, name=f"sleeper-{i}")
        await trio.testing.wait_all_tasks_blocked()
        small = snapshot(max_entries=10, time_budget=ROOMY)
        assert len(small["tasks"]) == 10
        assert small["omitted"] > 0
        assert sum(t["count"] for t in small["tasks"]) + small["omitted"] == small["task_count"]
        nursery.cancel_scope.cancel()


async def test_sections_are_added_and_a_failing_one_costs_only_itself() -> None:
    def broken() -> Any:
        raise RuntimeError("no such table")

    add_section("turn", lambda: {"kind": "idle"})
    add_section("broken", broken)
    snap = snapshot()
    assert snap["sections"]["turn"] == {"kind": "idle"}
    assert snap["sections"]["broken"] == {"error": "RuntimeError: no such table"}
    text = render(snap)
    assert "turn: none (the engine waits for a prompt)" in text
    assert "broken: could not be read: RuntimeError: no such table" in text


def test_being_inspectable_steals_no_signal_handler() -> None:
    catchable = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    before = {s: signal.getsignal(s) for s in catchable}

    async def main() -> dict[str, Any]:
        add_section("x", dict)
        return snapshot()

    assert trio.run(main)["sections"] == {"x": {}}
    assert {s: signal.getsignal(s) for s in catchable} == before


async def test_a_snapshot_stops_reading_at_its_time_budget_and_says_so() -> None:
    async with trio.open_nursery() as nursery:
        for i in range(3000):
            nursery.start_soon(trio.sleep_forever, name=f"sleeper-{i}")
        await trio.testing.wait_all_tasks_blocked()
        cut = snapshot(time_budget=0.0)
        assert cut["complete"] is False
        assert cut["task_count"] >= 3000
        assert sum(t["count"] for t in cut["tasks"]) + cut["omitted"] == cut["task_count"]
        assert "the time to read them ran out" in render(cut)
        assert snapshot(time_budget=ROOMY)["complete"] is True
        nursery.cancel_scope.cancel()


# A program that asks for a snapshot before and after importing trio.testing, with a task in
# wait_all_tasks_blocked the second time; prints what a harness's imports had loaded.
LATE_TESTING = """
import sys
import trio
import tether.harness, tether.inspect
loaded = [m for m in ("pytest", "trio.testing") if m in sys.modules]

async def main():
    tether.inspect.snapshot()
    import trio.testing
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.testing.wait_all_tasks_blocked, 100, name="idler")
        await trio.testing.wait_all_tasks_blocked()  # the idler is parked in its own wait
        (idler,) = [t for t in tether.inspect.snapshot()["tasks"] if "idler" in t["names"]]
        nursery.cancel_scope.cancel()
    print(loaded, idler["wait"]["kind"])

trio.run(main)
"""


def test_a_harness_imports_no_test_library_and_inspect_still_sees_one_imported_later() -> None:
    """Issue 43: ``tether.harness`` imported ``trio.testing`` and with it pytest (0.1 s of CPU
    at every harness start); a task waiting in ``wait_all_tasks_blocked`` is still named, once
    a program imports it."""
    done = subprocess.run(
        [sys.executable, "-c", LATE_TESTING], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "idle"], done.stdout
