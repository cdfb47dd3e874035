"""tether on both loops, in one run, each against that loop's own way:

- ``ChildGroup.run(["true"])`` under ``trio.run`` against ``trio.run_process``, and under
  ``asyncio.run`` against ``asyncio.create_subprocess_exec`` with its output piped and read to
  the end (``communicate()``, which waits for the exit); each pair interleaved, so load affects
  both alike (target: tether at least 0.9x the loop's own call on both);
- durable ``Transcript.tool_call`` appends per second under each loop against a bare loop of
  ``os.write`` + ``os.fsync`` of the same lines (``journal.py``'s), rounds alternating.

Run with ``make bench`` (or ``python benchmarks/loops.py [--samples N] [--rounds N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

import tether
from journal import bare_appends

ARGV = ["true"]


async def pair(
    ours: Callable[[], Awaitable[object]], theirs: Callable[[], Awaitable[object]], samples: int
) -> tuple[float, float]:
    """Median seconds of ``ours()`` and ``theirs()``, interleaved, after a warm-up."""
    mine, other = [], []
    for _ in range(5):
        await ours()
        await theirs()
    for _ in range(samples):
        started = time.perf_counter()
        await ours()
        mine.append(time.perf_counter() - started)
        started = time.perf_counter()
        await theirs()
        other.append(time.perf_counter() - started)
    return statistics.median(mine), statistics.median(other)


async def on_trio(samples: int) -> tuple[float, float]:
    async with tether.ChildGroup(f"bench-{uuid.uuid4().hex[:8]}", 1, grace=0.2) as group:

        async def trio_own() -> object:
            return await trio.run_process(ARGV, capture_stdout=True, capture_stderr=True)

        return await pair(lambda: group.run(ARGV), trio_own, samples)


async def on_asyncio(samples: int) -> tuple[float, float]:
    async with tether.ChildGroup(f"bench-{uuid.uuid4().hex[:8]}", 1, grace=0.2) as group:

        async def asyncio_own() -> object:
            process = await asyncio.create_subprocess_exec(
                *ARGV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            return await process.communicate()

        return await pair(lambda: group.run(ARGV), asyncio_own, samples)


async def appends(path: str, count: int) -> float:
    """Durable ``tool_call`` appends per second, on whichever loop runs this."""
    async with await tether.Transcript.open(path) as tr:
        started = time.perf_counter()
        for i in range(count):
            await tr.tool_call("bash", {"cmd": f"echo {i}"})
        return count / (time.perf_counter() - started)


def durable(rounds: int, count: int) -> dict[str, tuple[float, float]]:
    """Median appends/s of tether on each loop and of the bare loop beside it."""
    rates: dict[str, list[tuple[float, float]]] = {"trio": [], "asyncio": []}
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as directory:
        for n in range(rounds):
            for loop in rates:
                ours = os.path.join(directory, f"{loop}-{n}.jsonl")
                bare = os.path.join(directory, f"bare-{loop}-{n}.jsonl")
                if loop == "trio":
                    rate = trio.run(appends, ours, count)
                else:
                    rate = asyncio.run(appends(ours, count))
                rates[loop].append((rate, bare_appends(bare, count)))
    return {
        loop: (statistics.median(r for r, _ in pairs), statistics.median(b for _, b in pairs))
        for loop, pairs in rates.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    trio_ours, trio_theirs = trio.run(on_trio, args.samples)
    aio_ours, aio_theirs = asyncio.run(on_asyncio(args.samples))
    lines = [
        f'`ChildGroup.run(["true"])` on both loops ({args.samples} samples each, median;'
        " interleaved with the loop's own call)",
        "",
        "| loop | `ChildGroup.run` | the loop's own call | speed / the loop's |",
        "| --- | ---: | ---: | ---: |",
        f"| trio (`trio.run_process`) | {trio_ours * 1e3:.2f} ms | {trio_theirs * 1e3:.2f} ms"
        f" | {trio_theirs / trio_ours:.2f}x |",
        f"| asyncio (`create_subprocess_exec` + `communicate`) | {aio_ours * 1e3:.2f} ms"
        f" | {aio_theirs * 1e3:.2f} ms | {aio_theirs / aio_ours:.2f}x |",
        "",
        f"Durable `tool_call` appends/s on both loops ({args.rounds} rounds of 1000, median)",
        "",
        "| loop | `Transcript.tool_call` | bare `write` + `fsync` | tether / bare |",
        "| --- | ---: | ---: | ---: |",
    ]
    for loop, (ours, bare) in durable(args.rounds, 1000).items():
        lines.append(f"| {loop} | {ours:,.0f} | {bare:,.0f} | {ours / bare:.2f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
