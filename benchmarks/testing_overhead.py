"""What tether.testing costs: a trio run watched against the same run unwatched, the detector's
checks while tasks legitimately wait on each other, and how soon each deadlock is named.

Run with ``make bench`` (or ``python benchmarks/testing_overhead.py``). ``--suite [pytest
args]`` instead runs tether's whole suite once with the plugin's checks off, with the detector
only, and with both (as the suite runs), in one run each (the target is under 1.10x; the
suite's own run-to-run noise is several percent).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from tether.testing import Deadlock, DeadlockDetector
from tether.testing._engage import watching_runs

CUSHION = 1.0


def detector() -> DeadlockDetector:
    return DeadlockDetector(CUSHION, 300.0)


def timeout_only() -> DeadlockDetector:
    found = DeadlockDetector(CUSHION, 300.0)
    found.deadlocks = False
    return found


def timed(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, time.perf_counter() - started)
    return best / repeat


def watched(
    make: Callable[[], DeadlockDetector] | None, main: Callable[[], Awaitable[object]]
) -> Callable[[], None]:
    def run() -> None:
        if make is None:
            trio.run(main)
        else:
            with watching_runs(make):
                trio.run(main)

    return run


async def short_test() -> None:
    """A typical short trio test: a nursery, a channel, a few hundred checkpoints."""
    send, receive = trio.open_memory_channel[int](0)
    async with trio.open_nursery() as nursery:

        async def produce() -> None:
            async with send:
                for n in range(300):
                    await send.send(n)

        nursery.start_soon(produce)
        async with receive:
            async for _ in receive:
                pass


def waiting_test(waiters: int) -> Callable[[], Awaitable[None]]:
    """``waiters`` tasks wait on Events a running task holds, beside 2 s of steady work: the
    detector finds them all blocked and analyses the run every few cushions."""

    async def main() -> None:
        events = [trio.Event() for _ in range(waiters)]
        async with trio.open_nursery() as nursery:
            for event in events:
                nursery.start_soon(event.wait)
            deadline = trio.current_time() + 2.5
            while trio.current_time() < deadline:
                await trio.sleep(0.001)
            for event in events:
                event.set()

    return main


def run_table() -> None:
    print("## A trio run, watched by the plugin against the same run unwatched\n")
    print("| run | unwatched | timeout only | detector | detector / unwatched |")
    print("| --- | --- | --- | --- | --- |")
    bare = timed(watched(None, short_test), 100)
    only = timed(watched(timeout_only, short_test), 100)
    full = timed(watched(detector, short_test), 100)
    print(f"| a short test (300 sends) | {bare * 1e3:.2f} ms | {only * 1e3:.2f} ms |"
          f" {full * 1e3:.2f} ms | {full / bare:.2f}x |")  # fmt: skip


def analysis_table() -> None:
    print("\n## Tasks legitimately waiting for the whole run (2.5 s, cushion 1 s): CPU time\n")
    print("| waiting tasks | unwatched | detector | analyses | detector / unwatched |")
    print("| --- | --- | --- | --- | --- |")
    for waiters in (10, 100, 1000):
        main = waiting_test(waiters)
        started = time.process_time()
        trio.run(main)
        bare = time.process_time() - started
        made: list[DeadlockDetector] = []

        def make(made: list[DeadlockDetector] = made) -> DeadlockDetector:
            made.append(detector())
            return made[-1]

        started = time.process_time()
        with watching_runs(make):
            trio.run(main)
        full = time.process_time() - started
        print(f"| {waiters} | {bare:.3f} s | {full:.3f} s | {made[0].analyses} |"
              f" {full / bare:.3f}x |")  # fmt: skip


async def partial_beside_keepalive() -> None:
    s1, r1 = trio.open_memory_channel[int](0)
    s2, r2 = trio.open_memory_channel[int](0)

    async def keepalive() -> None:
        while True:
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keepalive)
        nursery.start_soon(r1.receive)
        nursery.start_soon(r2.receive)
        await trio.sleep_forever()  # the senders stay on this stack
        await s1.send(1)
        await s2.send(1)


async def event_while_serving() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_tcp, handler, 0)
        await trio.Event().wait()


async def all_asleep() -> None:
    await trio.Event().wait()


def latency_table() -> None:
    print(f"\n## Time to name a deadlock (cushion {CUSHION:g} s)\n")
    print("| program | named after | / (cushion + 1 s) |")
    print("| --- | --- | --- |")
    cases: list[tuple[str, Callable[[], Awaitable[None]], dict[str, object]]] = [
        ("every task asleep", all_asleep, {}),
        ("two waiters beside a 0.5 s keepalive (trio #1085)", partial_beside_keepalive, {}),
        ("an Event while serve_tcp listens (trio #182)", event_while_serving, {}),
        ("under the autojump clock", all_asleep,
         {"clock": trio.testing.MockClock(autojump_threshold=0)}),
    ]  # fmt: skip
    for name, main, options in cases:
        started = time.perf_counter()
        try:
            with watching_runs(detector):
                trio.run(main, **options)  # type: ignore[arg-type]
        except Deadlock:
            took = time.perf_counter() - started
            print(f"| {name} | {took:.2f} s | {took / (CUSHION + 1):.2f}x |")
        else:
            print(f"| {name} | not named | - |")


def suite(args: list[str]) -> None:
    off = ["-o", "tether_deadlock=false", "-o", "tether_timeout=0",
           "-o", "tether_process_leaks=false"]  # fmt: skip
    configs = [
        ("without the plugin's checks", off),
        ("deadlock detector and timeout", [*off, "-o", "tether_deadlock=true",
                                           "-o", "tether_timeout=300"]),
        ("detector, timeout and leak guard (the suite's setting)", []),
    ]  # fmt: skip
    times = []
    for name, extra in configs:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, *args],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        times.append((name, time.perf_counter() - started))
    print(f"tether's suite ({' '.join(args)}), one run per configuration\n")
    print("| configuration | wall time | ratio to the first |")
    print("| --- | --- | --- |")
    for name, seconds in times:
        print(f"| {name} | {seconds:.1f} s | {seconds / times[0][1]:.3f}x |")


def main() -> None:
    if sys.argv[1:2] == ["--suite"]:
        suite(sys.argv[2:] or ["tests"])
        return
    run_table()
    analysis_table()
    latency_table()


if __name__ == "__main__":
    main()
