"""Epoch stores: bumps per second and p50/p99 latency of SqliteEpochStore and EtcdEpochStore
(a real three-member etcd cluster on loopback, started here), and what 1,000 sessions'
ownership keys on one host lease cost: one keepalive per third of the TTL, whatever the count.

Run: ``.venv/bin/python benchmarks/stores.py`` (needs Debian's etcd-server; ``make test``
installs it). Ratios are tether / competitor: SQLite against a bare ``sqlite3`` upsert with the
same settings, etcd against one bare ``/v3/kv/put`` round trip with httpx (a bump is a read and
a compare-and-swap transaction: two round trips by design).
"""

from __future__ import annotations

import base64
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from etcd_cluster import Cluster
from tether.epochs import EtcdEpochStore, SqliteEpochStore

N = 400
SESSIONS = 1000


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> list[float]:
    """Latency of each of ``n`` sequential calls, in seconds."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        await op(i)
        out.append(time.perf_counter() - start)
    return out


def row(name: str, lat: list[float], floor: list[float]) -> str:
    p50, p99 = statistics.median(lat), statistics.quantiles(lat, n=100)[98]
    f50 = statistics.median(floor)
    rate = len(lat) / sum(lat)
    return (
        f"| {name} | {rate:,.0f} | {p50 * 1e3:.2f} ms | {p99 * 1e3:.2f} ms"
        f" | {f50 * 1e3:.2f} ms | {p50 / f50:.2f}x |"
    )


async def main(workdir: Path, cluster: Cluster) -> None:
    print(f"## Epoch bumps, {N} sequential, one session\n")
    print("| store | bumps per second | p50 | p99 | competitor p50 | tether / competitor |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    async with SqliteEpochStore(workdir / "e.sqlite3") as store:
        sqlite_lat = await timed(N, lambda i: store.bump("s"))
    bare = sqlite3.connect(workdir / "bare.sqlite3", isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = FULL")
    bare.execute("CREATE TABLE e (s TEXT PRIMARY KEY, n INTEGER)")

    async def bare_bump(i: int) -> None:
        bare.execute("BEGIN IMMEDIATE")
        bare.execute(
            "INSERT INTO e VALUES ('s', 1) ON CONFLICT (s) DO UPDATE SET n = n + 1 RETURNING n"
        ).fetchone()
        bare.execute("COMMIT")

    bare_lat = await timed(N, bare_bump)
    print(row("SQLite (bare sqlite3 upsert)", sqlite_lat, bare_lat))
    # A bulk claim of 1,000 sessions outlasts the default 5 s bound of one call.
    store = EtcdEpochStore(cluster.endpoints, prefix="/bench", host_id="bench", timeout=60)
    etcd_lat = await timed(N, lambda i: store.bump("s"))
    url = f"http://{cluster.endpoints[0]}/v3/kv/put"
    key = base64.b64encode(b"/bench-bare/s").decode()
    async with httpx.AsyncClient() as client:

        async def bare_put(i: int) -> None:
            value = base64.b64encode(str(i).encode()).decode()
            (await client.post(url, json={"key": key, "value": value})).raise_for_status()

        put_lat = await timed(N, bare_put)
    print(row("etcd (bare httpx put)", etcd_lat, put_lat))
    versus = statistics.median(etcd_lat) / statistics.median(sqlite_lat)
    print(f"\netcd bump p50 / SQLite bump p50: {versus:.2f}x\n")

    print(f"## {SESSIONS:,} sessions' ownership keys on one host lease\n")
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(SESSIONS):
            nursery.start_soon(store.bump, f"owned-{i}")
    claim = time.perf_counter() - start
    lease = store.lease.id
    keep = [0.0]
    async with httpx.AsyncClient() as client:
        url = f"http://{cluster.endpoints[0]}/v3/lease/"

        async def keepalive(i: int) -> None:
            (await client.post(url + "keepalive", json={"ID": str(lease)})).raise_for_status()

        keep = await timed(50, keepalive)
        empty = (await client.post(url + "grant", json={"TTL": 10})).json()["ID"]

        async def keepalive_empty(i: int) -> None:
            (await client.post(url + "keepalive", json={"ID": empty})).raise_for_status()

        keep_empty = await timed(50, keepalive_empty)
        # tether's refresh: the keepalive, then the read that tells it whether another
        # daemon took its host id.
        refresh = await timed(50, lambda i: store.lease.refresh())
        live = await client.post(url + "timetolive", json={"ID": str(lease), "keys": True})
        keys = len(live.json().get("keys") or [])
    per_ttl = 3
    print("| measure | result | against | ratio |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| keys on the lease | {keys:,} | | |")
    print(
        f"| keepalive p50, {keys:,} keys / no keys | {statistics.median(keep) * 1e3:.2f} ms"
        f" | {statistics.median(keep_empty) * 1e3:.2f} ms"
        f" | {statistics.median(keep) / statistics.median(keep_empty):.2f}x |"
    )
    print(
        f"| tether's lease refresh p50 (keepalive + host id check) / bare keepalive"
        f" | {statistics.median(refresh) * 1e3:.2f} ms | {statistics.median(keep) * 1e3:.2f} ms"
        f" | {statistics.median(refresh) / statistics.median(keep):.2f}x |"
    )
    print(
        f"| keepalives per TTL, one lease / a lease per session | {per_ttl}"
        f" | {per_ttl * SESSIONS:,} | {1 / SESSIONS:.3f}x |"
    )
    print(f"| claiming {SESSIONS:,} sessions (concurrent bumps) | {claim:.2f} s | | |")
    start = time.perf_counter()
    await store.revoke()
    revoked = (time.perf_counter() - start) * 1e3
    print(f"| revoking the lease (every key freed) | {revoked:.1f} ms | | |")
    await store.aclose()


def run() -> None:
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "etcd").mkdir()
        cluster = Cluster(binary, workdir / "etcd")
        try:
            cluster.start_all()
            trio.run(main, workdir, cluster)
        finally:
            cluster.stop()


if __name__ == "__main__":
    run()
