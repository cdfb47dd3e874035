"""Issue 29: ``tether run`` and ``ChildGroup`` against what they stand in for, in one run.

Run with ``make bench`` (or ``python benchmarks/parity.py [--rounds N] [--groups N]``):

- start-up: ``tether run -- true`` against ``python -c pass`` and ``tini -- true`` (if
  installed; ``apt-get install tini``), median wall time of ``rounds`` interleaved runs
  (target: at most 1.3x the interpreter's); and the RSS of ``tether run``'s watcher;
- groups: ``groups`` groups open at once, entered one after another, with the keeper the run
  shares against one keeper per group (what every group started before ADR 0037, started
  here beside each group): enter time, and the keepers' total RSS and PSS;
- output: the peak RSS of a process that runs a tool printing 500 MB (on stdout, then on both
  streams) with the default ``max_output``, through ``ChildGroup.run``,
  ``trio.run_process(capture_stdout=True)`` and ``subprocess.run(capture_output=True)``, each
  in a fresh interpreter (target: cap + 16 MiB per stream for tether).

``ChildGroup.run(["true"])`` against ``trio.run_process`` is ``tools.py``'s first table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

import psutil
import trio

import tether
from tether.process._keeper import Keeper

MIB = 1024 * 1024


def median_ms(argv: list[str], rounds: int, others: list[list[str]]) -> list[float]:
    """Median wall time of each of ``[argv, *others]``, interleaved round by round."""
    every = [argv, *others]
    times: list[list[float]] = [[] for _ in every]
    for command in every:
        subprocess.run(command, check=True)  # warm the page cache
    for _ in range(rounds):
        for index, command in enumerate(every):
            started = time.perf_counter()
            subprocess.run(command, check=True)
            times[index].append(time.perf_counter() - started)
    return [statistics.median(each) * 1000 for each in times]


def watcher_rss() -> tuple[float, float]:
    """RSS and PSS (MB) of ``tether run``'s watcher while ``sleep`` runs under it."""
    run = subprocess.Popen([sys.executable, "-m", "tether", "run", "--", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for process in psutil.process_iter(["cmdline", "ppid"]):
                cmdline = process.info["cmdline"] or []
                ours = "run" in cmdline and "sleep" in cmdline and "tether" in " ".join(cmdline)
                if ours and process.pid != run.pid and process.info["ppid"] != run.pid:
                    full = process.memory_full_info()
                    return full.rss / MIB, full.pss / MIB
            time.sleep(0.05)
        raise RuntimeError("no watcher found")
    finally:
        run.terminate()
        run.wait()


def startup(rounds: int) -> None:
    script = os.path.join(os.path.dirname(sys.executable), "tether")  # the console script
    tether_run = [script, "run", "--", "true"]
    if not os.access(script, os.X_OK):
        tether_run = [sys.executable, "-m", "tether", "run", "--", "true"]
    others = [[sys.executable, "-c", "pass"]]
    tini = shutil.which("tini")
    if tini is not None:
        others.append([tini, "-s", "--", "true"])  # a subreaper, as tether run is
    ours, python, *rest = median_ms(tether_run, rounds, others)
    print(f"\n`tether run -- true`, median of {rounds} interleaved runs\n")
    print("| competitor | competitor | tether run | tether / competitor |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| `python -c pass` | {python:.2f} ms | {ours:.2f} ms | {ours / python:.2f}x |")
    if rest:
        print(f"| `tini -s -- true` | {rest[0]:.2f} ms | {ours:.2f} ms | {ours / rest[0]:.2f}x |")
    else:
        print("| `tini -- true` | not installed | | |")
    rss, pss = watcher_rss()
    print(f"\nthe watcher: RSS {rss:.1f} MB, PSS {pss:.1f} MB (pages shared with tether run)")


def keepers_memory() -> tuple[int, float, float]:
    """The keepers below this process: how many, their total RSS and PSS (MB)."""
    found = [
        child
        for child in psutil.Process().children()
        if "tether._keeper" in " ".join(child.cmdline())
    ]
    infos = [child.memory_full_info() for child in found]
    return len(found), sum(i.rss for i in infos) / MIB, sum(i.pss for i in infos) / MIB


async def open_groups(count: int, shared: bool) -> tuple[float, int, float, float]:
    """``count`` groups entered one after another; before ADR 0037 each entry started a
    keeper of its own, which ``Keeper.start`` beside each group stands in for."""
    async with contextlib.AsyncExitStack() as stack:
        started = time.perf_counter()
        for _ in range(count):
            group = tether.ChildGroup(uuid.uuid4().hex, 1, grace=0.2, keeper=shared)
            await stack.enter_async_context(group)
            if not shared:
                keeper = await Keeper.start(0.2)
                stack.push_async_callback(keeper.close)
        took = time.perf_counter() - started
        return (took, *keepers_memory())


def groups(count: int) -> None:
    rows = []
    for shared in (False, True):
        took, keepers, rss, pss = trio.run(open_groups, count, shared)
        rows.append((shared, took, keepers, rss, pss))
    (_, old_took, old_n, old_rss, old_pss), (_, took, n, rss, pss) = rows
    print(f"\n{count} groups open at once\n")
    print("| | a keeper per group (before) | one shared keeper | shared / before |")
    print("| --- | ---: | ---: | ---: |")
    ratio = took / old_took
    print(f"| enter all | {old_took * 1000:.0f} ms | {took * 1000:.0f} ms | {ratio:.2f}x |")
    print(f"| keeper processes | {old_n} | {n} | |")
    print(f"| keepers' RSS | {old_rss:.0f} MB | {rss:.1f} MB | {rss / old_rss:.3f}x |")
    print(f"| keepers' PSS | {old_pss:.0f} MB | {pss:.1f} MB | {pss / old_pss:.3f}x |")


OUTPUT = {
    "tether": """
import sys, trio, tether
async def main():
    async with tether.ChildGroup("bench-output", 1) as group:
        result = await group.run(sys.argv[1:])
    assert len(result.stdout) + len(result.stderr) > 0
trio.run(main)
""",
    "trio": """
import sys, trio
async def main():
    await trio.run_process(sys.argv[1:], capture_stdout=True, capture_stderr=True)
trio.run(main)
""",
    "subprocess": """
import subprocess, sys
subprocess.run(sys.argv[1:], capture_output=True)
""",
}


def peak_rss(way: str, tool: list[str]) -> float:
    """The peak RSS (MB) of a fresh interpreter running ``tool`` the ``way`` named."""
    peak = "import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    code = OUTPUT[way] + "\n" + peak
    done = subprocess.run([sys.executable, "-c", code, *tool], capture_output=True, check=True)
    return int(done.stdout.split()[-1]) / 1024


def output() -> None:
    size = 500 * 1000 * 1000
    one = ["head", "-c", str(size), "/dev/zero"]
    both = ["sh", "-c", f"head -c {size} /dev/zero; head -c {size} /dev/zero >&2"]
    print("\npeak RSS of a process running a tool that prints 500 MB (default `max_output`,")
    print("256 MiB kept per stream; the rest read and counted)\n")
    print("| output | `ChildGroup.run` | `trio.run_process` | `subprocess.run` | tether / trio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, tool in (("500 MB on stdout", one), ("500 MB on each stream", both)):
        ours, trios, plain = (peak_rss(way, tool) for way in ("tether", "trio", "subprocess"))
        ratio = ours / trios
        print(f"| {label} | {ours:.0f} MB | {trios:.0f} MB | {plain:.0f} MB | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--groups", type=int, default=50)
    args = parser.parse_args()
    print(f"# tether run and ChildGroup parity ({os.cpu_count()} cores)")
    startup(args.rounds)
    groups(args.groups)
    output()


if __name__ == "__main__":
    main()
