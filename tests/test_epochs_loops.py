"""The SQLite epoch store on both loops (issue 44): the same assertions under ``trio.run`` and
``asyncio.run``; a real writer process killed by SIGKILL mid-bump. The etcd store is trio's
only for now, and says so under asyncio."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from loops import LOOPS, run_on
from tether import EtcdEpochStore, SqliteEpochStore, UnsupportedBackend


async def gather(loop: str, jobs: list[Callable[[], Awaitable[int]]]) -> list[int]:
    """Every job's result, the jobs run concurrently on ``loop``."""
    if loop == "asyncio":
        return list(await asyncio.gather(*(job() for job in jobs)))
    results: list[int] = []

    async def one(job: Callable[[], Awaitable[int]]) -> None:
        results.append(await job())

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(one, job)
    return results


@pytest.mark.parametrize("loop", LOOPS)
def test_concurrent_bumps_issue_each_epoch_once(tmp_path: Path, loop: str) -> None:
    """Forty concurrent bumps of one session (group-committed) get forty different epochs,
    1 to 40, and a reopened store knows the last."""
    issued: list[int] = []
    after: list[int | None] = []

    async def main() -> None:
        store = SqliteEpochStore(str(tmp_path / "e.db"))
        try:
            jobs = [lambda: store.bump("s1") for _ in range(40)]
            issued.extend(await gather(loop, jobs))
        finally:
            await store.aclose()
        again = SqliteEpochStore(str(tmp_path / "e.db"))
        try:
            after.append(await again.current("s1"))
        finally:
            await again.aclose()

    run_on(loop, main)
    assert sorted(issued) == list(range(1, 41))
    assert after == [40]


BUMPER = """
    import sys, tether
    async def main():
        store = tether.SqliteEpochStore(sys.argv[1])
        while True:
            print(await store.bump("s1"), flush=True)
"""
BUMPERS = {
    "trio": textwrap.dedent(BUMPER) + "import trio\ntrio.run(main)\n",
    "asyncio": textwrap.dedent(BUMPER) + "import asyncio\nasyncio.run(main())\n",
}


@pytest.mark.parametrize("loop", LOOPS)
def test_a_bumper_sigkilled_mid_bump_never_sees_an_epoch_again(tmp_path: Path, loop: str) -> None:
    """SIGKILL while a process bumps as fast as it can: every epoch it was given is durable,
    so the next bump (on the same loop) is above all of them."""
    path = str(tmp_path / "e.db")
    bumper = subprocess.Popen(
        [sys.executable, "-c", BUMPERS[loop], path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert bumper.stdout is not None
        given = [int(bumper.stdout.readline()) for _ in range(30)]
    finally:
        bumper.send_signal(signal.SIGKILL)
        bumper.communicate()
    assert given == list(range(1, 31))
    nexts: list[int] = []

    async def main() -> None:
        store = SqliteEpochStore(path)
        try:
            nexts.append(await store.bump("s1"))
        finally:
            await store.aclose()

    run_on(loop, main)
    assert nexts[0] > given[-1]


def test_the_etcd_store_under_asyncio_says_it_is_trio_s_only() -> None:
    """No request is made: the first call names the loop and what to use instead."""

    async def main() -> None:
        store = EtcdEpochStore(["127.0.0.1:9"], host_id="h", timeout=1.0)
        try:
            with pytest.raises(UnsupportedBackend, match=r"trio only.*SqliteEpochStore"):
                await store.bump("s1")
        finally:
            await store.aclose()

    asyncio.run(main())
