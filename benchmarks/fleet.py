"""One daemon, 1,000 attached sessions: what it costs to hold them, and to answer ``ps``.

Run with ``python benchmarks/fleet.py [--sessions N]`` (``agentd.py`` runs it too). The
harnesses are the minimal harness of ``agentd.py`` (hello, then a pong for every ping) started
with ``python -S``, so the machine can hold 1,000 of them. The daemon is embedded here, with a
1 s heartbeat, on SQLite. Measured over 10 heartbeats once every session is attached:

- the daemon's CPU share of one core (target < 5 %), against the same daemon holding 10
  sessions, in the same run;
- its RSS;
- ``ps``: a control request's round trip (the daemon's part), and ``tether ps`` as a user runs
  it (a new process; target < 100 ms) against ``python -c pass`` (the interpreter's floor).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import psutil
import trio

from agentd import MINI, start_sessions
from tether import Agentd, SqliteEpochStore
from tether.agentd._client import request

HARNESS = [sys.executable, "-S", "-c", MINI]


@attrs.frozen
class Fleet:
    sessions: int
    start_seconds: float
    cpu: float
    """The daemon's share of one core while every session idles attached."""
    rss: float
    """MiB."""
    ps_request: float
    """Median seconds of one ``ps`` control request."""
    ps_command: float
    """Median seconds of ``tether ps`` in a new process."""


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))


async def hold(workdir: Path, count: int, window: float = 10.0, polls: int = 20) -> Fleet:
    """Start ``count`` sessions on one daemon, then measure it while they idle."""
    workdir.mkdir(mode=0o700)
    sock = workdir / "agentd.sock"
    async with SqliteEpochStore(workdir / "epochs.sqlite3") as store:
        agentd = Agentd(store, sock, HARNESS, heartbeat=1.0, spawn_limit=8)
        async with agentd.running(stop_harnesses=True):
            started = time.perf_counter()
            await start_sessions(agentd, count)
            start_seconds = time.perf_counter() - started
            assert len(agentd.attached()) == count
            await trio.sleep(2.0)  # the last spawns settle
            me = psutil.Process()
            before, started = me.cpu_times(), time.perf_counter()
            await trio.sleep(window)
            after, wall = me.cpu_times(), time.perf_counter() - started
            cpu = (after.user - before.user + after.system - before.system) / wall
            assert len(agentd.attached()) == count, "a harness was lost while idle"
            rss = me.memory_info().rss / 2**20
            requests = []
            for _ in range(polls):
                started = time.perf_counter()
                answer = await request(str(sock), "ps")
                requests.append(time.perf_counter() - started)
                assert len(answer["sessions"]) == count  # type: ignore[arg-type]
            commands = []
            argv = [sys.executable, "-m", "tether", "ps", "--socket", str(sock)]
            for _ in range(polls // 2):
                started = time.perf_counter()
                done = await trio.run_process(argv, capture_stdout=True)
                commands.append(time.perf_counter() - started)
                assert done.stdout.count(b"\n") == count + 1
    return Fleet(
        count,
        start_seconds,
        cpu,
        rss,
        statistics.median(requests),
        statistics.median(commands),
    )


def interpreter_floor(rounds: int = 10) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def rows(fleet: Fleet, small: Fleet, floor: float) -> list[str]:
    n, m = fleet.sessions, small.sessions
    return [
        f"| daemon CPU, {n:,} sessions, 1 s heartbeat (target < 5 %) | {fleet.cpu * 100:.2f} %"
        f" | {small.cpu * 100:.2f} % ({m} sessions) | {fleet.cpu / small.cpu:.1f}x |",
        f"| daemon RSS, {n:,} sessions | {fleet.rss:.0f} MiB | {small.rss:.0f} MiB ({m})"
        f" | {fleet.rss / small.rss:.2f}x |",
        f"| `ps` control request, {n:,} sessions | {fleet.ps_request * 1e3:.1f} ms"
        f" | {small.ps_request * 1e3:.1f} ms ({m}) | {fleet.ps_request / small.ps_request:.1f}x |",
        f"| `tether ps`, a new process, {n:,} sessions (target < 100 ms)"
        f" | {fleet.ps_command * 1e3:.0f} ms | {floor * 1e3:.0f} ms (`python -c pass`)"
        f" | {fleet.ps_command / floor:.1f}x |",
        f"| start {n:,} sessions, 16 at a time | {fleet.start_seconds:.1f} s"
        f" | {small.start_seconds:.2f} s ({m}) | - |",
    ]


async def measure(sessions: int) -> list[str]:
    raise_fd_limit(4 * sessions + 256)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        small = await hold(base / "small", 10)
        fleet = await hold(base / "fleet", sessions)
    return rows(fleet, small, interpreter_floor())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    lines = trio.run(measure, args.sessions)
    print(f"agentd fleet: {args.sessions:,} attached sessions on one daemon\n")
    print("| measure | tether | reference | ratio |\n| --- | --- | --- | --- |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
