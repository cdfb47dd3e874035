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
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

import psutil
import trio

import tether
import tether.signals

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


async def main_async(rounds: int, samples: int) -> None:
    import logging

    logging.getLogger("tether").setLevel(logging.ERROR)  # SIGKILL warnings are expected here
    for line in await signal_latency(samples):
        print(line, flush=True)
    print(flush=True)
    for line in await teardown_table(rounds):
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
