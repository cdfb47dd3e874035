"""Tool runs on both loops: ``ChildGroup.run(["true"])`` under ``trio.run`` against
``trio.run_process``, and under ``asyncio.run`` against ``asyncio.create_subprocess_exec``
with its output piped and read to the end (``communicate()``, which waits for the exit).

Run with ``make bench`` (or ``python benchmarks/loops.py [--samples N]``). Each loop's pair runs
in one process, interleaved, so load affects both alike (target: tether at least 0.9x the
loop's own call on both).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

import tether

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
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
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
