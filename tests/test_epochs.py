"""tether.epochs: SqliteEpochStore, alone and shared by ten real processes."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from helpers import python
from tether import EpochStore, SessionRecord, SqliteEpochStore, Superseded


async def test_bump_issues_strictly_increasing_epochs_per_session(tmp_path: Path) -> None:
    async with SqliteEpochStore(tmp_path / "e.db") as store:
        assert await store.current("s1") is None
        assert [await store.bump("s1") for _ in range(3)] == [1, 2, 3]
        assert await store.bump("s2") == 1
        assert await store.current("s1") == 3
        await store.check("s1", 3)


async def test_check_refuses_an_old_epoch_naming_both(tmp_path: Path) -> None:
    async with SqliteEpochStore(tmp_path / "e.db") as store:
        await store.bump("s1")
        await store.bump("s1")
        with pytest.raises(
            Superseded, match=r"session 's1': epoch 1 is superseded; the current epoch is 2"
        ) as caught:
            await store.check("s1", 1)
        assert (caught.value.session, caught.value.epoch, caught.value.current) == ("s1", 1, 2)
        with pytest.raises(Superseded, match="no epoch was ever issued"):
            await store.check("unknown", 1)


async def test_epochs_survive_reopening(tmp_path: Path) -> None:
    async with SqliteEpochStore(tmp_path / "e.db") as store:
        await store.bump("s1")
    async with SqliteEpochStore(tmp_path / "e.db") as again:
        assert await again.bump("s1") == 2


async def test_save_is_fenced_by_the_epoch(tmp_path: Path) -> None:
    async with SqliteEpochStore(tmp_path / "e.db") as store:
        old = await store.bump("s1")
        new = await store.bump("s1")
        record = SessionRecord(pid=42, create_time=1.5, boot_id="b", state="running")
        await store.save("s1", record, epoch=new)
        saved = await store.record("s1")
        assert saved == SessionRecord(42, 1.5, "b", "running", 0, None, epoch=new)
        with pytest.raises(Superseded, match="epoch 1 is superseded; the current epoch is 2"):
            await store.save("s1", SessionRecord(pid=7, state="phantom"), epoch=old)
        assert await store.record("s1") == saved, "a stale writer changed the record"
        assert await store.record("nobody") is None


def test_superseded_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(Superseded("s", 3, 4)))
    assert (error.session, error.epoch, error.current) == ("s", 3, 4)
    assert str(error) == "session 's': epoch 3 is superseded; the current epoch is 4"


def test_the_sqlite_store_is_an_epoch_store(tmp_path: Path) -> None:
    assert isinstance(SqliteEpochStore(tmp_path / "e.db"), EpochStore)


BUMPER = """
    import json, sys, trio, tether
    async def main():
        async with tether.SqliteEpochStore(sys.argv[1]) as store:
            print(json.dumps([await store.bump("shared") for _ in range(int(sys.argv[2]))]))
    trio.run(main)
"""


async def test_ten_processes_bumping_concurrently_never_share_an_epoch(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    async with SqliteEpochStore(db) as store:  # create the file and schema first
        await store.current("shared")
    procs = [
        subprocess.Popen(python(BUMPER, str(db), "100"), stdout=subprocess.PIPE, text=True)
        for _ in range(10)
    ]
    try:
        outputs = [await trio.to_thread.run_sync(p.communicate, None, 120) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert all(p.returncode == 0 for p in procs)
    per_process = [json.loads(out) for out, _ in outputs]
    everything = [epoch for epochs in per_process for epoch in epochs]
    assert sorted(everything) == list(range(1, 1001)), "an epoch was issued twice or skipped"
    for epochs in per_process:
        assert epochs == sorted(epochs)
        assert len(set(epochs)) == len(epochs)
    async with SqliteEpochStore(db) as store:
        assert await store.current("shared") == 1000
    assert sys.executable


async def test_the_outbox_keeps_prompts_until_settled(tmp_path: Path) -> None:
    from tether.epochs import QueuedPrompt

    async with SqliteEpochStore(tmp_path / "e.db") as store:
        await store.enqueue(QueuedPrompt("s1", "a", "first", {"k": 1}))
        await store.enqueue(QueuedPrompt("s2", "b", "second"))
        await store.enqueue(QueuedPrompt("s1", "a", "first again"))  # same id: one prompt
        await store.attempted("s1", "a")
        await store.attempted("s1", "a")
    async with SqliteEpochStore(tmp_path / "e.db") as store:  # it survived the close
        assert await store.pending() == [
            QueuedPrompt("s1", "a", "first", {"k": 1}, attempts=2),
            QueuedPrompt("s2", "b", "second"),
        ]
        await store.settle("s1", "a", "delivered")
        assert [p.id for p in await store.pending()] == ["b"]
        await store.save("s2", SessionRecord(state="running"), epoch=await store.bump("s2"))
        await store.save("s1", SessionRecord(state="stopped"), epoch=await store.bump("s1"))
        assert await store.sessions() == ["s1", "s2"]
