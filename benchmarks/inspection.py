"""How long ``tether inspect`` takes against a live harness of 10, 1,000 and 10,000 tasks, beside
``py-spy dump`` of the same process; and what being inspectable costs when nobody asks.

Run with ``make bench`` (or ``python benchmarks/inspection.py [--runs N]``). A real agentd (in this
process, on a real socket and SQLite store) runs a real harness whose engine, on a prompt
``spawn N``, starts N tasks waiting on one Event. Each run times the whole command a person
types, ``tether inspect SESSION --json`` (a fresh interpreter, the request, the harness's
snapshot, the reply), ``tether ps`` (the same interpreter and request, no harness asked: the
floor), and ``py-spy dump --pid HARNESS`` (which reads the interpreter's thread
stacks from outside, and shows no trio task; skipped if py-spy is not installed). The idle cost
runs one trio workload (tasks spawned, values through a tether channel) with a harness's
sections registered and without, alternated, and compares the medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

import tether
from tether import Agentd, SqliteEpochStore
from tether.inspect import add_section

ENGINE = textwrap.dedent(
    """
    import trio, tether
    from tether.wire import Prompt

    async def engine(commands, ctx):
        async with trio.open_nursery() as nursery:
            async for command in commands:
                if isinstance(command, Prompt) and command.text.startswith("spawn "):
                    event = trio.Event()
                    for i in range(int(command.text.split()[1])):
                        nursery.start_soon(event.wait, name=f"worker-{i}")

    raise SystemExit(tether.run_harness(engine))
    """
)


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - started


Row = tuple[int, float, float, float, float | None]


async def latencies(runs: int) -> list[Row]:
    """``(tasks, tether inspect, the harness's own reading, tether ps, py-spy)`` medians."""
    rows = []
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        directory.chmod(0o700)
        (directory / "engine.py").write_text(ENGINE)
        socket = str(directory / "agentd.sock")
        async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
            agentd = Agentd(store, socket, [sys.executable, str(directory / "engine.py")])
            async with agentd.running(stop_harnesses=True):
                spawned = 0
                for tasks in (10, 1000, 10_000):
                    await agentd.deliver("bench", f"spawn {tasks - spawned}")
                    spawned = tasks
                    while (await agentd.inspect("bench"))["snapshot"]["task_count"] < tasks:
                        await trio.sleep(0.05)
                    found = await agentd.inspect("bench")
                    pid = found["pid"]
                    inspect = [sys.executable, "-m", "tether", "inspect", "--socket", socket,
                               "bench", "--json"]  # fmt: skip
                    ps = [sys.executable, "-m", "tether", "ps", "--socket", socket]
                    ours, reads, floor, theirs = [], [], [], []
                    for _ in range(runs):
                        ours.append(await trio.to_thread.run_sync(_timed, inspect))
                        floor.append(await trio.to_thread.run_sync(_timed, ps))
                        reads.append((await agentd.inspect("bench"))["snapshot"]["took"])
                        if spy:
                            dump = [spy, "dump", "--pid", str(pid)]
                            theirs.append(await trio.to_thread.run_sync(_timed, dump))
                    rows.append((tasks, statistics.median(ours), statistics.median(reads),
                                 statistics.median(floor),
                                 statistics.median(theirs) if theirs else None))  # fmt: skip
    return rows


async def _workload() -> None:
    tx, rx = tether.channel(int, 16, name="work")

    async def producer(sender: tether.Sender[int]) -> None:
        async with sender:
            for i in range(200):
                await sender.send(i)

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(producer, tx.clone())
        tx.close()
        async for _ in rx:
            pass
    for _ in range(20):
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(trio.lowlevel.checkpoint)


async def _inspectable() -> None:
    add_section("turn", lambda: {"kind": "idle"})
    add_section("tools", list)
    add_section("transcript", list)
    await _workload()


def idle_cost(runs: int) -> tuple[float, float]:
    """Medians of the workload without and with a harness's sections registered."""
    plain, armed = [], []
    for _ in range(runs):
        for target, into in ((_workload, plain), (_inspectable, armed)):
            started = time.perf_counter()
            trio.run(target)
            into.append(time.perf_counter() - started)
    return statistics.median(plain), statistics.median(armed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = trio.run(latencies, args.runs)
    print("## tether inspect against a live harness (median of", args.runs, "runs)\n")
    print("| tasks | tether inspect (ms) | harness's reading (ms) | tether ps (ms) |"
          " py-spy dump (ms) | tether/py-spy | inspect/ps |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tasks, ours, read, floor, theirs in rows:
        spy = f"{theirs * 1000:.1f}" if theirs is not None else "not installed"
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        print(f"| {tasks:,} | {ours * 1000:.1f} | {read * 1000:.1f} | {floor * 1000:.1f} | {spy}"
              f" | {ratio} | {ours / floor:.2f} |")  # fmt: skip
    plain, armed = idle_cost(max(args.runs, 9))
    print("\n## Being inspectable when nobody asks (one trio workload, medians)\n")
    print("| workload | plain (ms) | inspectable (ms) | inspectable/plain |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| 10,000 sends, 2,000 tasks | {plain * 1000:.1f} | {armed * 1000:.1f} | "
          f"{armed / plain:.2f} |")  # fmt: skip
    print(json.dumps({"rows": rows, "idle": [plain, armed]}), file=sys.stderr)


if __name__ == "__main__":
    main()
