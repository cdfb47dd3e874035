"""Tree teardown and signal latency: tether against os.killpg and the psutil recipe, in one run.

Run with ``make bench`` (or ``python benchmarks/process.py [--rounds N]``). Each round builds the
same tree under a fresh ``ChildGroup``: one leader with 100 plain ``sleep`` children, 100
``setsid sleep`` grandchildren (their own sessions) and 100 double-forked ``sleep`` daemons
(reparented to this process, the subreaper), 300 descendants in all. Then one way of stopping it
runs, timed, and the processes still carrying the session's mark are counted; whatever survived
is then cleaned up (untimed) by the group's exit.

- tether: ``ChildGroup.aclose()`` with grace 0.2 s.
- killpg: ``os.killpg(leader, SIGKILL)`` and wait for the leader.
- psutil: ``leader.children(recursive=True)``, ``terminate()``, ``wait_procs(timeout=0.2)``, then
  ``kill()`` and ``wait_procs`` for what is left: the recipe in psutil's documentation.

Then the latency from ``kill()`` to the event, for ``tether.signals.receive`` (signalfd, with the
sender) and ``trio.open_signal_receiver`` (a Python handler, no sender).

Issue 17 adds:

- the same 300-process tree under an owner process that is SIGKILLed: how many of the tree are
  still alive ``2 x grace + 1`` s later, and how long until none is, with the keeper (the
  owner under ``trio.run`` and, issue 44, under ``asyncio.run``) and with the keeper-less
  fallback (``ChildGroup(keeper=False)``) side by side;
- spawn-and-wait of ``true`` through a group (and so its keeper) against
  ``trio.run_process(["true"])``, median of 200 (target: tether at least 0.8x trio's speed);
- ``tether run -- true`` against ``python -c pass`` and ``tini -- true`` (if installed), median
  of 30 wall times (target: under 2x the interpreter's own start-up).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

import psutil
import trio

import tether
import tether.signals
from tether.process._table import marks

GRACE = 0.2
PER_KIND = 100
LEADER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)  # die on SIGINT like the sleeps, without a traceback
n = int(sys.argv[2])
for _ in range(n):
    subprocess.Popen(["sleep", "1000"])
for _ in range(n):
    subprocess.Popen(["setsid", "sleep", "1000"])
for _ in range(n):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "1000"])
        os._exit(0)
    os.wait()
open(sys.argv[1], "w").write("ready")
time.sleep(1000)
"""

Stopper = Callable[[tether.ChildGroup, tether.Child], Awaitable[None]]


def marked_alive(session: str) -> int:
    """Live processes carrying ``TETHER_SESSION=session``: a scan of every process."""
    return len(tether.find_twins(session))


async def stop_tether(group: tether.ChildGroup, leader: tether.Child) -> None:
    await group.aclose()


async def stop_killpg(group: tether.ChildGroup, leader: tether.Child) -> None:
    os.killpg(leader.pid, signal.SIGKILL)
    await leader.wait()


async def stop_psutil(group: tether.ChildGroup, leader: tether.Child) -> None:
    def recipe() -> None:
        parent = psutil.Process(leader.pid)
        procs = [*parent.children(recursive=True), parent]
        for p in procs:
            p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=GRACE)
        for p in alive:
            p.kill()
        psutil.wait_procs(alive, timeout=GRACE)

    # psutil reaps the leader itself (it is our child) inside wait_procs.
    await trio.to_thread.run_sync(recipe)
    leader.poll()


async def one_round(stopper: Stopper, workdir: str) -> tuple[float, int]:
    """Build the tree, stop it with ``stopper``; (seconds, survivors)."""
    session = f"bench-{uuid.uuid4().hex[:8]}"
    ready = os.path.join(workdir, session)
    async with tether.ChildGroup(session, 1, grace=GRACE) as group:
        leader = await group.spawn([sys.executable, "-c", LEADER, ready, str(PER_KIND)])
        with trio.fail_after(120):
            while not os.path.exists(ready):
                await trio.sleep(0.01)
        assert len(group.members()) == 3 * PER_KIND + 1, len(group.members())
        started = time.perf_counter()
        await stopper(group, leader)
        elapsed = time.perf_counter() - started
        survivors = marked_alive(session)
    assert marked_alive(session) == 0, "the clean-up left survivors"
    return elapsed, survivors


async def teardown_table(rounds: int) -> list[str]:
    lines = [
        f"Teardown of a tree of {3 * PER_KIND} descendants ({PER_KIND} plain, {PER_KIND} setsid,"
        f" {PER_KIND} double-forked; grace {GRACE} s; {rounds} rounds)",
        "",
        "| way | survivors (each round) | wall time, best | wall time, worst | time / tether |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    results: dict[str, tuple[list[float], list[int]]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(rounds):
            for name, stopper in (
                ("tether `ChildGroup` exit", stop_tether),
                ("`os.killpg(leader, SIGKILL)`", stop_killpg),
                ("psutil `children(recursive=True)` + `wait_procs`", stop_psutil),
            ):
                elapsed, survivors = await one_round(stopper, workdir)
                times, counts = results.setdefault(name, ([], []))
                times.append(elapsed)
                counts.append(survivors)
    base = min(results["tether `ChildGroup` exit"][0])
    for name, (times, counts) in results.items():
        lines.append(
            f"| {name} | {', '.join(map(str, counts))} | {min(times):.3f} s | {max(times):.3f} s"
            f" | {min(times) / base:.2f} |"
        )
    return lines


async def signal_latency(samples: int) -> list[str]:
    ours: list[float] = []
    theirs: list[float] = []
    async with tether.signals.receive(signal.SIGUSR1) as events:
        for _ in range(samples):
            started = time.perf_counter()
            os.kill(os.getpid(), signal.SIGUSR1)
            await events.recv()
            ours.append(time.perf_counter() - started)
    with trio.open_signal_receiver(signal.SIGUSR1) as received:
        for _ in range(samples):
            started = time.perf_counter()
            os.kill(os.getpid(), signal.SIGUSR1)
            await received.__anext__()
            theirs.append(time.perf_counter() - started)

    def p99(values: list[float]) -> float:
        return statistics.quantiles(values, n=100)[98] * 1e6

    base = statistics.median(theirs) * 1e6
    return [
        "",
        f"Signal to event ({samples} samples, µs)",
        "",
        "| receiver | median | p99 | median / trio |",
        "| --- | ---: | ---: | ---: |",
        f"| `tether.signals.receive` (signalfd, sender named) | {statistics.median(ours) * 1e6:.1f}"
        f" | {p99(ours):.1f} | {statistics.median(ours) * 1e6 / base:.2f} |",
        f"| `trio.open_signal_receiver` (no sender) | {base:.1f} | {p99(theirs):.1f} | 1.00 |",
    ]


OWNER = """
import sys, anyio, tether
async def main():
    keeper = sys.argv[4] == "keeper"
    async with tether.ChildGroup(sys.argv[1], 1, grace=float(sys.argv[3]), keeper=keeper) as g:
        await g.spawn([sys.executable, "-c", sys.argv[5], sys.argv[2], sys.argv[6]])
        await anyio.sleep_forever()
"""
RUNNERS = {
    "trio": "import trio\ntrio.run(main)\n",
    "asyncio": "import asyncio\nasyncio.run(main())\n",
}
"""How the owner runs ``main``: under ``trio.run`` or ``asyncio.run`` (issue 44)."""


async def owner_killed_table(rounds: int) -> list[str]:
    lines = [
        "",
        f"The owner SIGKILLed under a tree of {3 * PER_KIND + 1} processes (grace {GRACE} s,"
        f" {rounds} rounds; the bound is 2 x grace + 1 = {2 * GRACE + 1:.1f} s)",
        "",
        "| group | alive at the bound (each round) | time to none, worst |",
        "| --- | --- | ---: |",
    ]
    with tempfile.TemporaryDirectory() as workdir:
        for mode, loop in (("keeper", "trio"), ("keeper", "asyncio"), ("fallback", "trio")):
            counts, times = [], []
            for _ in range(rounds):
                left, took = await _kill_owner(workdir, mode, loop)
                counts.append(left)
                times.append(took)
            worst = "never (cleaned up after 5 s)" if math.inf in times else f"{max(times):.3f} s"
            name = (
                f"keeper (default), owner on {loop}"
                if mode == "keeper"
                else ("no keeper (`keeper=False`)")
            )
            lines.append(f"| {name} | {', '.join(map(str, counts))} | {worst} |")
    return lines


async def _kill_owner(workdir: str, mode: str, loop: str) -> tuple[int, float]:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    ready = os.path.join(workdir, session)
    code = OWNER + RUNNERS[loop]
    owner = await trio.lowlevel.open_process(
        [sys.executable, "-c", code, session, ready, str(GRACE), mode, LEADER, str(PER_KIND)]
    )
    try:
        with trio.fail_after(120):
            while not os.path.exists(ready):
                await trio.sleep(0.01)
        while marked_alive(session) < 3 * PER_KIND + 1:
            await trio.sleep(0.01)
        owner.kill()
        await owner.wait()
        died = time.perf_counter()
        took = math.inf
        left_at_bound = None
        while time.perf_counter() - died < 5.0:
            alive = marked_alive(session)
            elapsed = time.perf_counter() - died
            if left_at_bound is None and elapsed >= 2 * GRACE + 1:
                left_at_bound = alive
            if alive == 0:
                took = elapsed
                break
            await trio.sleep(0.005)
        return (left_at_bound if left_at_bound is not None else 0), took
    finally:
        for pid in psutil.pids():  # what the fallback leaves, cleaned up untimed
            mark = marks(pid)
            if mark is not None and mark.session == session:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()


async def spawn_latency(samples: int) -> list[str]:
    ours, theirs = [], []
    async with tether.ChildGroup(f"bench-{uuid.uuid4().hex[:8]}", 1, grace=GRACE) as group:
        for _ in range(10):  # warm both paths
            await (await group.spawn(["true"])).wait()
            await trio.run_process(["true"])
        for _ in range(samples):
            started = time.perf_counter()
            child = await group.spawn(["true"])
            await child.wait()
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            await trio.run_process(["true"])
            theirs.append(time.perf_counter() - started)
    mine, trios = statistics.median(ours), statistics.median(theirs)
    return [
        "",
        f"Spawn and wait for `true` ({samples} samples, median)",
        "",
        "| way | latency | speed / trio's |",
        "| --- | ---: | ---: |",
        f"| `ChildGroup.spawn` + `Child.wait` (through the keeper) | {mine * 1e3:.2f} ms"
        f" | {trios / mine:.2f}x |",
        f"| `trio.run_process` | {trios * 1e3:.2f} ms | 1.00x |",
    ]


def startup_table(samples: int) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = os.path.join(os.path.dirname(sys.executable), "tether")  # the console script
    ways = [
        ("`tether run -- true`", [command, "run", "--", "true"]),
        ("`python -c pass`", [sys.executable, "-c", "pass"]),
    ]
    tini = shutil.which("tini")
    if tini is not None:
        ways.append(("`tini -s -- true`", [tini, "-s", "--", "true"]))
    medians = {}
    for name, argv in ways:
        subprocess.run(argv, env=env, check=True)  # writes the bytecode caches
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            subprocess.run(argv, env=env, check=True)
            times.append(time.perf_counter() - started)
        medians[name] = statistics.median(times)
    base = medians["`python -c pass`"]
    lines = [
        "",
        f"Start-up to exit, wall time ({samples} runs, median)",
        "",
        "| command | time | / `python -c pass` |",
        "| --- | ---: | ---: |",
    ]
    for name, median in medians.items():
        lines.append(f"| {name} | {median * 1e3:.1f} ms | {median / base:.2f}x |")
    if tini is None:
        lines.append("| `tini` | not installed (`apt-get install tini`) | |")
    return lines


async def main_async(rounds: int, samples: int) -> None:
    import logging

    logging.getLogger("tether").setLevel(logging.ERROR)  # SIGKILL warnings are expected here
    for line in await signal_latency(samples):
        print(line, flush=True)
    print(flush=True)
    for line in await teardown_table(rounds):
        print(line, flush=True)
    for line in await owner_killed_table(rounds):
        print(line, flush=True)
    for line in await spawn_latency(200):
        print(line, flush=True)
    for line in startup_table(30):
        print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, trio {trio.__version__}, psutil {psutil.__version__}")
    trio.run(main_async, args.rounds, args.samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
