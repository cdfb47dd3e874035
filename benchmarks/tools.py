"""Tool runs: ``ChildGroup.run`` against ``trio.run_process(..., capture_stdout=True)``, and the
CPU cost of watching a silent tool.

Run with ``make bench`` (or ``python benchmarks/tools.py [--samples N] [--watch S]``). Both
competitors run in the same process, interleaved, so load affects both alike:

- ``run(["true"])`` and a run writing 1 MiB, median of ``samples`` (target: tether at least
  0.8x trio's speed);
- ``run(["sleep", ...])`` watched for ``watch`` seconds (stall threshold past the end): this
  process's CPU time over that wall time, against the same wait on ``trio.run_process``
  (target: the watch under 1 % of a core).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import uuid

import trio

import tether

MIB = ["head", "-c", str(1024 * 1024), "/dev/zero"]


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def latency(group: tether.ChildGroup, argv: list[str], samples: int) -> tuple[float, float]:
    ours, theirs = [], []
    for _ in range(5):  # warm both paths
        await group.run(argv)
        await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    for _ in range(samples):
        started = time.perf_counter()
        result = await group.run(argv)
        ours.append(time.perf_counter() - started)
        assert result.returncode == 0
        started = time.perf_counter()
        await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
        theirs.append(time.perf_counter() - started)
    return statistics.median(ours), statistics.median(theirs)


async def watch_cost(group: tether.ChildGroup, seconds: float) -> tuple[float, float]:
    """CPU share of one core while a silent tool runs ``seconds``: tether's, trio's."""
    argv = ["sleep", str(seconds)]
    before, started = cpu(), time.monotonic()
    await group.run(argv, stall_after=seconds * 10)
    ours = (cpu() - before) / (time.monotonic() - started)
    before, started = cpu(), time.monotonic()
    await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    theirs = (cpu() - before) / (time.monotonic() - started)
    return ours, theirs


async def main_async(samples: int, watch: float) -> None:
    async with tether.ChildGroup(f"bench-{uuid.uuid4().hex[:8]}", 1, grace=0.2) as group:
        true_ours, true_trio = await latency(group, ["true"], samples)
        mib_ours, mib_trio = await latency(group, MIB, samples)
        watch_ours, watch_trio = await watch_cost(group, watch)
    lines = [
        f"Tool runs ({samples} samples each, median; interleaved with trio's)",
        "",
        "| run | `ChildGroup.run` | `trio.run_process` | speed / trio's |",
        "| --- | ---: | ---: | ---: |",
        f"| `true` | {true_ours * 1e3:.2f} ms | {true_trio * 1e3:.2f} ms"
        f" | {true_trio / true_ours:.2f}x |",
        f"| 1 MiB of output | {mib_ours * 1e3:.2f} ms | {mib_trio * 1e3:.2f} ms"
        f" | {mib_trio / mib_ours:.2f}x |",
        "",
        f"Watching a silent tool ({watch:g} s of `sleep`): this process's CPU, share of one core",
        "",
        "| way | CPU | tether / trio |",
        "| --- | ---: | ---: |",
        f"| `ChildGroup.run` (sampling its tree every second) | {watch_ours * 100:.3f} % |"
        f" {watch_ours / watch_trio if watch_trio else float('inf'):.1f} |",
        f"| `trio.run_process` (no watch) | {watch_trio * 100:.3f} % | 1.0 |",
    ]
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--watch", type=float, default=60.0)
    args = parser.parse_args(argv)
    trio.run(main_async, args.samples, args.watch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
