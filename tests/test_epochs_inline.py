"""The SQLite epoch store's inline bumps (ADR 0030): committed on the trio thread, the WAL
synced by the kernel; a held lock, a checkpoint, a failed sync or ``TETHER_AIO=0`` send a bump
to the worker thread. Real files, real processes, a real SIGKILL."""

from __future__ import annotations

import errno
import os
import platform
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from helpers import python, tmpfs, wait_until
from tether import SqliteEpochStore, _aio
from tether.epochs import StoreUnavailable, _inline

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"),
    reason="the kernel's AIO path is Linux x86_64/aarch64",
)


def counting_worker_calls(store: SqliteEpochStore, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    worker = store._database.worker
    run = worker.run

    async def counted(fn: Any, *args: Any) -> Any:
        calls.append(fn)
        return await run(fn, *args)

    monkeypatch.setattr(worker, "run", counted)
    return calls


async def test_bumps_commit_on_the_trio_thread_and_sync_the_wal_in_its_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "e.sqlite3"
    async with SqliteEpochStore(path) as store:
        assert await store.bump("s1") == 1
        assert store._inline is not None
        calls = counting_worker_calls(store, monkeypatch)
        assert [await store.bump("s1") for _ in range(50)] == list(range(2, 52))
        assert calls == [], "a bump went to the worker thread"
        assert os.stat(f"{path}-wal").st_size == _inline.WAL_RESERVE
        assert await store.current("s1") == 51  # the worker's connection reads them
    assert not Path(f"{path}-wal").exists(), "the last connection checkpoints and removes it"
    async with SqliteEpochStore(path) as again:
        assert await again.bump("s1") == 52


async def test_a_lock_held_elsewhere_sends_the_bump_to_the_worker_which_waits_for_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.sqlite3"
    async with SqliteEpochStore(path) as store:
        assert await store.bump("s1") == 1
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        got: list[int] = []

        async def bump() -> None:
            got.append(await store.bump("s1"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bump)
            with trio.move_on_after(0.3):
                await wait_until(lambda: bool(got), timeout=1.0)
            assert got == [], "the bump did not wait for the lock"
            other.execute("UPDATE epochs SET epoch = 10 WHERE session = 's1'")
            other.execute("COMMIT")
        other.close()
        assert got == [11]
        assert await store.bump("s1") == 12
        assert store._inline is not None, "the inline path is kept after a busy lock"


async def test_every_nth_bump_checkpoints_on_the_worker_so_the_wal_stays_in_its_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without checkpoints 300 bumps write 300 pages of WAL, five times the reserve; with one
    every 10 bumps the WAL restarts and never grows past it."""
    monkeypatch.setattr(_inline, "CHECKPOINT_EVERY", 10)
    monkeypatch.setattr(_inline, "WAL_RESERVE", 64 * 4096)
    path = tmp_path / "e.sqlite3"
    async with SqliteEpochStore(path) as store:
        await store.bump("s0")
        calls = counting_worker_calls(store, monkeypatch)
        for i in range(300):
            assert await store.bump(f"s{i % 3}") == i // 3 + 1 + (i % 3 == 0)
        assert 25 <= len(calls) <= 35, "one bump in ten should be the worker's"
        assert os.stat(f"{path}-wal").st_size == 64 * 4096


async def test_a_failed_sync_is_store_unavailable_and_later_bumps_go_on_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed bump's epoch was committed but may not be durable: it is returned to no one,
    and is never issued again."""
    async with SqliteEpochStore(tmp_path / "e.sqlite3") as store:
        assert await store.bump("s1") == 1

        async def failed_sync(self: _aio.KernelSync) -> bool:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(_aio.KernelSync, "datasync", failed_sync)
        with pytest.raises(StoreUnavailable, match="Input/output error"):
            await store.bump("s1")
        monkeypatch.undo()
        assert store._inline is None
        assert await store.bump("s1") == 3


async def test_tether_aio_0_keeps_every_bump_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_AIO", "0")
    async with SqliteEpochStore(tmp_path / "e.sqlite3") as store:
        assert [await store.bump("s1") for _ in range(3)] == [1, 2, 3]
        assert store._inline is None


BUMP_FOREVER = """
    import sys, trio, tether
    async def main():
        async with tether.SqliteEpochStore(sys.argv[1]) as store:
            while True:
                print(await store.bump("s1"), flush=True)
    trio.run(main)
"""


async def test_a_sigkilled_bumper_never_loses_an_epoch_it_returned(tmp_path: Path) -> None:
    """Killed mid-stream, with a reserved WAL whose tail is zeros: reopening recovers every
    epoch that was returned, and the next bump is after all of them."""
    path = tmp_path / "e.sqlite3"
    for _ in range(3):
        child = subprocess.Popen(python(BUMP_FOREVER, str(path)), stdout=subprocess.PIPE)
        assert child.stdout is not None
        seen: list[int] = []
        try:
            while len(seen) < 200:
                line = await trio.to_thread.run_sync(child.stdout.readline)
                assert line, "the bumper died"
                seen.append(int(line))
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        assert seen == list(range(seen[0], seen[0] + len(seen)))
        async with SqliteEpochStore(path) as store:
            assert (await store.current("s1") or 0) >= seen[-1]
            assert await store.bump("s1") > seen[-1]


async def test_a_disk_too_full_for_the_wal_reserve_leaves_bumps_on_the_worker(
    tmp_path: Path,
) -> None:
    """On a 1 MiB filesystem the 4 MiB reserve cannot be written: the inline path is not
    taken, every bump is still issued once, and the partly grown WAL opens again."""
    with tmpfs(tmp_path / "small", "1m") as disk:
        path = disk / "e.sqlite3"
        async with SqliteEpochStore(path) as store:
            assert [await store.bump("s1") for _ in range(20)] == list(range(1, 21))
            assert store._inline is None
            assert os.stat(f"{path}-wal").st_size < 512 * 1024, "the failed reserve was kept"
        async with SqliteEpochStore(path) as again:
            assert await again.bump("s1") == 21
