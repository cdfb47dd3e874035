"""tether.epochs: the EpochStore protocol on both stores (SQLite and a real etcd cluster),
alone and shared by ten real processes."""

from __future__ import annotations

import contextlib
import json
import pickle
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from etcd_cluster import Cluster
from helpers import python, wait_until
from tether import EpochStore, SessionRecord, SqliteEpochStore, Superseded
from tether.epochs import HostIdInUse, OwnedElsewhere, QueuedPrompt, StoreUnavailable

Opener = Callable[[], Any]
"""Opens another handle on the same store (a reopen, or another process's view)."""


@pytest.fixture(params=["sqlite", "etcd"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opener(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Opener:
    if kind == "sqlite":
        return lambda: SqliteEpochStore(tmp_path / "e.db")
    from tether.epochs import EtcdEpochStore

    cluster: Cluster = request.getfixturevalue("etcd_cluster")
    prefix = f"/test-{uuid.uuid4().hex}"
    return lambda: EtcdEpochStore(cluster.endpoints, prefix=prefix, host_id="h1", lease_ttl=5)


async def test_bump_issues_strictly_increasing_epochs_per_session(opener: Opener) -> None:
    async with opener() as store:
        assert await store.current("s1") is None
        assert [await store.bump("s1") for _ in range(3)] == [1, 2, 3]
        assert await store.bump("s2") == 1
        assert await store.current("s1") == 3
        await store.check("s1", 3)


async def test_check_refuses_an_old_epoch_naming_both(opener: Opener) -> None:
    async with opener() as store:
        await store.bump("s1")
        await store.bump("s1")
        with pytest.raises(
            Superseded, match=r"session 's1': epoch 1 is superseded; the current epoch is 2"
        ) as caught:
            await store.check("s1", 1)
        assert (caught.value.session, caught.value.epoch, caught.value.current) == ("s1", 1, 2)
        with pytest.raises(Superseded, match="no epoch was ever issued"):
            await store.check("unknown", 1)


async def test_epochs_survive_reopening(opener: Opener) -> None:
    async with opener() as store:
        await store.bump("s1")
    async with opener() as again:
        assert await again.bump("s1") == 2


async def test_save_is_fenced_by_the_epoch(opener: Opener) -> None:
    async with opener() as store:
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


def test_store_errors_pickle_with_their_fields() -> None:
    error = pickle.loads(pickle.dumps(HostIdInUse("http://e:2379", "a")))
    assert isinstance(error, StoreUnavailable), "every caller that refuses work on it"
    assert (error.endpoints, error.host) == ("http://e:2379", "a")
    assert str(error) == (
        "epoch store at http://e:2379: host id 'a' was taken by another daemon;"
        " give each daemon its own host id"
    )
    moved = pickle.loads(pickle.dumps(OwnedElsewhere("s", "b")))
    assert (moved.session, moved.host) == ("s", "b")


def test_both_stores_are_epoch_stores(opener: Opener) -> None:
    assert isinstance(opener(), EpochStore)


BUMPER = """
    import json, sys, trio, tether
    from tether.epochs import EtcdEpochStore
    async def main():
        kind, where, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        if kind == "sqlite":
            store = tether.SqliteEpochStore(where)
        else:
            endpoints, prefix = where.split(" ")
            store = EtcdEpochStore(endpoints.split(","), prefix=prefix, host_id="h1")
        async with store:
            print(json.dumps([await store.bump("shared") for _ in range(n)]))
    trio.run(main)
"""


async def test_ten_processes_bumping_concurrently_never_share_an_epoch(
    kind: str, opener: Opener
) -> None:
    n = 100 if kind == "sqlite" else 30
    async with opener() as store:  # create the file and schema first
        await store.current("shared")
        where = (
            str(store.path) if kind == "sqlite" else f"{','.join(store.endpoints)} {store.prefix}"
        )
    procs = [
        subprocess.Popen(python(BUMPER, kind, where, str(n)), stdout=subprocess.PIPE, text=True)
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
    assert sorted(everything) == list(range(1, 10 * n + 1)), "an epoch was issued twice or skipped"
    for epochs in per_process:
        assert epochs == sorted(epochs)
        assert len(set(epochs)) == len(epochs)
    async with opener() as store:
        assert await store.current("shared") == 10 * n
    assert sys.executable


async def test_the_outbox_keeps_prompts_until_settled(opener: Opener) -> None:
    async with opener() as store:
        await store.enqueue(QueuedPrompt("s1", "a", "first", {"k": 1}))
        await store.enqueue(QueuedPrompt("s2", "b", "second"))
        await store.enqueue(QueuedPrompt("s1", "a", "first again"))  # same id: one prompt
        await store.attempted("s1", "a")
        await store.attempted("s1", "a")
    async with opener() as store:  # it survived the close
        assert await store.pending() == [
            QueuedPrompt("s1", "a", "first", {"k": 1}, attempts=2),
            QueuedPrompt("s2", "b", "second"),
        ]
        await store.settle("s1", "a", "delivered")
        assert [p.id for p in await store.pending()] == ["b"]
        await store.settle("s1", "a", "delivered")  # settling twice changes nothing
        await store.enqueue(QueuedPrompt("s1", "a", "a retry of a delivered prompt"))
        assert [p.id for p in await store.pending()] == ["b"], "a settled id was queued again"
        await store.save("s2", SessionRecord(state="running"), epoch=await store.bump("s2"))
        await store.save("s1", SessionRecord(state="stopped"), epoch=await store.bump("s1"))
        assert await store.sessions() == ["s1", "s2"]


async def test_sqlite_prunes_settled_prompts_after_keep_settled(tmp_path: Path) -> None:
    """A settled prompt keeps its id (a retried enqueue is a no-op) but not its text; once
    ``keep_settled`` has passed, the next settle deletes it, and ``pending`` reads only what
    is pending through its index."""
    path = tmp_path / "epochs.sqlite3"
    keep = 0.2
    async with SqliteEpochStore(path, keep_settled=keep) as store:
        await store.enqueue(QueuedPrompt("s", "old", "x" * 10_000))
        await store.enqueue(QueuedPrompt("s", "new", "hello"))
        await store.settle("s", "old", "delivered")
        await store.settle("s", "old", "failed: a second outcome")  # the first one stays
        settled_at = time.time()
        await store.enqueue(QueuedPrompt("s", "old", "a retry"))
        assert [p.id for p in await store.pending()] == ["new"]
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            rows = db.execute("SELECT outcome, length(text) FROM outbox WHERE id = 'old'")
            assert rows.fetchall() == [("delivered", 0)]
            plan = db.execute(
                "EXPLAIN QUERY PLAN SELECT session, id, text, meta, attempts FROM outbox"
                " WHERE outcome IS NULL ORDER BY seq"
            ).fetchall()
            assert "outbox_pending" in str(plan)
        await wait_until(lambda: time.time() > settled_at + keep)
        await store.settle("s", "new", "delivered")  # prunes "old"
        await store.enqueue(QueuedPrompt("s", "old", "a retry, a day later"))
        assert [p.text for p in await store.pending()] == ["a retry, a day later"]


async def test_sqlite_opens_a_file_an_earlier_version_wrote(tmp_path: Path) -> None:
    """No ``host`` column, no ``settled_at``: both are added in place, and a prompt settled
    back then is dated now, so it is pruned after ``keep_settled`` like any other."""
    path = tmp_path / "epochs.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executescript(
            """
            CREATE TABLE epochs (session TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
            CREATE TABLE records (session TEXT PRIMARY KEY, epoch INTEGER NOT NULL, pid INTEGER,
                create_time REAL, boot_id TEXT, state TEXT NOT NULL, restarts INTEGER NOT NULL,
                reason TEXT);
            CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL,
                id TEXT NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0, outcome TEXT, UNIQUE (session, id));
            INSERT INTO epochs VALUES ('s', 3);
            INSERT INTO records VALUES ('s', 3, 42, 1.5, 'b', 'running', 0, NULL);
            INSERT INTO outbox (session, id, text, meta, outcome)
                VALUES ('s', 'done', 'hi', '{}', 'delivered'), ('s', 'queued', 'hey', '{}', NULL);
            """
        )
    async with SqliteEpochStore(path, keep_settled=0.1) as store:
        assert await store.record("s") == SessionRecord(42, 1.5, "b", "running", epoch=3)
        assert [p.id for p in await store.pending()] == ["queued"]
        await store.enqueue(QueuedPrompt("s", "done", "again"))
        assert [p.id for p in await store.pending()] == ["queued"], "a settled id came back"
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            (dated,) = db.execute("SELECT settled_at FROM outbox WHERE id = 'done'").fetchone()
        await wait_until(lambda: time.time() > dated + 0.1)
        await store.settle("s", "queued", "delivered")
        await store.enqueue(QueuedPrompt("s", "done", "again"))
        assert [p.id for p in await store.pending()] == ["done"]
    async with SqliteEpochStore(path) as store:  # and it opens again as it is
        assert await store.current("s") == 3


async def test_concurrent_sqlite_bumps_share_transactions_and_never_an_epoch(
    tmp_path: Path,
) -> None:
    """Bumps made while one commits go in the next transaction together: from two stores on
    one file (two connections, as two processes would have), 300 concurrent bumps over five
    sessions issue each session's epochs once each, with no gap, and fewer transactions than
    bumps."""
    path = tmp_path / "e.sqlite3"
    issued: dict[str, list[int]] = {}
    async with SqliteEpochStore(path) as a, SqliteEpochStore(path) as b:
        groups: list[int] = []
        for store in (a, b):
            commit = store._bumps._commit

            async def counting(sessions: Sequence[str], commit: Any = commit) -> list[int]:
                groups.append(len(sessions))
                return await commit(sessions)  # type: ignore[no-any-return]

            store._bumps._commit = counting  # type: ignore[method-assign]

        async def bump(store: SqliteEpochStore, session: str) -> None:
            issued.setdefault(session, []).append(await store.bump(session))

        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(bump, (a, b)[i % 2], f"s{i % 5}")
    for session, epochs in issued.items():
        assert sorted(epochs) == list(range(1, 61)), session
    assert sum(groups) == 300
    assert len(groups) < 300, "no bumps were grouped"
