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

With ``--etcd`` (needs Debian's etcd-server; a three-member loopback cluster is started here):
host a records N running sessions on its lease and dies; an ``adopt=True`` daemon on host b
takes them all over. Reported: from host a's death to b's first takeover (bounded by the
lease TTL), and to every session attached on b, against starting N fresh sessions on b.
"""

from __future__ import annotations

import argparse
import resource
import shutil
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
from tether import Agentd, EpochStore, SessionRecord, SqliteEpochStore
from tether.agentd._client import request
from tether.epochs import EtcdEpochStore

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


@attrs.frozen
class Takeover:
    sessions: int
    ttl: float
    first: float
    """Seconds from host a's death to b's first takeover event."""
    all_attached: float
    """Seconds from host a's death to every session attached on b."""
    fresh: float
    """Seconds to start as many fresh sessions on b."""


async def takeover(workdir: Path, endpoints: list[str], count: int, ttl: int = 3) -> Takeover:
    """Host a records ``count`` running sessions and dies; host b (``adopt=True``) takes them."""
    workdir.mkdir(mode=0o700)
    prefix = f"/fleet-{time.time_ns()}"
    host_a = EtcdEpochStore(endpoints, prefix=prefix, host_id="a", lease_ttl=ttl, timeout=60)
    names = [f"t{i}" for i in range(count)]
    async with trio.open_nursery() as nursery:
        lease = trio.CancelScope()

        async def hold_lease(task_status: trio.TaskStatus[None]) -> None:
            with lease:
                await host_a.keep_alive(task_status=task_status)

        await nursery.start(hold_lease)
        epochs = {}

        async def record(name: str) -> None:
            epochs[name] = await host_a.bump(name)
            await host_a.save(name, SessionRecord(state="running"), epoch=epochs[name])

        async with trio.open_nursery() as saving:
            for name in names:
                saving.start_soon(record, name)
        host_b = EtcdEpochStore(endpoints, prefix=prefix, host_id="b", lease_ttl=ttl, timeout=60)
        b = Agentd(host_b, workdir / "b.sock", HARNESS, heartbeat=1.0, spawn_limit=8, adopt=True)
        async with b.running(stop_harnesses=True):
            lease.cancel()  # host a dies: no more keepalives
            died = time.perf_counter()
            first = None
            while len(b.attached()) < count:
                if first is None and any(s.state != "elsewhere" for s in b.status()):
                    first = time.perf_counter() - died
                await trio.sleep(0.05)
            all_attached = time.perf_counter() - died
            started = time.perf_counter()
            await start_sessions(b, count, prefix="fresh")
            fresh = time.perf_counter() - started
        await _close(host_a, host_b)
    return Takeover(count, ttl, first or all_attached, all_attached, fresh)


async def _close(*stores: EpochStore) -> None:
    for store in stores:
        await store.aclose()  # type: ignore[attr-defined]


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


def takeover_rows(taken: Takeover) -> list[str]:
    n, ttl = taken.sessions, taken.ttl
    floor = ttl + taken.fresh
    return [
        f"| etcd takeover by an `adopt` daemon: host a's death to the first session taken"
        f" | {taken.first:.2f} s | {ttl:.0f} s (the lease TTL) | {taken.first / ttl:.2f}x |",
        f"| etcd takeover: host a's death to all {n:,} sessions attached on b"
        f" | {taken.all_attached:.1f} s | {floor:.1f} s (TTL + {n:,} fresh starts)"
        f" | {taken.all_attached / floor:.2f}x |",
    ]


async def measure(sessions: int, endpoints: list[str] | None) -> list[str]:
    raise_fd_limit(4 * sessions + 256)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        small = await hold(base / "small", 10)
        fleet = await hold(base / "fleet", sessions)
        lines = rows(fleet, small, interpreter_floor())
        if endpoints is not None:
            lines += takeover_rows(await takeover(base / "takeover", endpoints, sessions))
    return lines


def with_etcd(sessions: int) -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
    from etcd_cluster import Cluster

    binary = shutil.which("etcd") or "/usr/bin/etcd"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "etcd").mkdir()
        cluster = Cluster(binary, Path(tmp) / "etcd")
        try:
            cluster.start_all()
            return trio.run(measure, sessions, list(cluster.endpoints))
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--etcd", action="store_true", help="also the takeover on etcd")
    args = parser.parse_args()
    lines = with_etcd(args.sessions) if args.etcd else trio.run(measure, args.sessions, None)
    print(f"agentd fleet: {args.sessions:,} attached sessions on one daemon\n")
    print("| measure | tether | reference | ratio |\n| --- | --- | --- | --- |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
