"""``SqliteEpochStore``: epochs and session records in one SQLite file, safe across processes.

WAL journal with ``synchronous=FULL``: NORMAL may lose the last commit on power loss and so hand
out an epoch twice. Every ``sqlite3`` error (a lock held past the busy timeout, a full disk, a
file that is not a database) is a ``StoreUnavailable`` naming the file, never a raw
``OperationalError``. Every bump and every fenced write is one ``BEGIN IMMEDIATE`` transaction,
which takes the write lock up front, so two processes can never read the same epoch and both
write the next one; a busy timeout makes them queue instead of failing. The blocking sqlite3
calls run on the store's own worker thread, in order, so the trio run never waits on disk;
bumps are committed on the trio thread and their WAL synced by the kernel where it can
(``_inline``, ADR 0030), as durable as the rest.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from os import PathLike
from typing import TypeVar

from .. import _aio
from .._batch import GroupCommit
from .._sqlite import Database, SqliteFile, immediate, prepare_file
from ._inline import BUMP, InlineBumps
from ._store import (
    FencedStore,
    QueuedPrompt,
    SessionRecord,
    StoreInUse,
    StoreUnavailable,
    fence_write,
)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS epochs (
    session TEXT PRIMARY KEY,
    epoch   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    session     TEXT PRIMARY KEY,
    epoch       INTEGER NOT NULL,
    pid         INTEGER,
    create_time REAL,
    boot_id     TEXT,
    state       TEXT NOT NULL,
    restarts    INTEGER NOT NULL,
    reason      TEXT,
    host        TEXT,
    extra       TEXT
);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    session  TEXT NOT NULL,
    id       TEXT NOT NULL,
    text     TEXT NOT NULL,
    meta     TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    outcome  TEXT,
    settled_at REAL,
    UNIQUE (session, id)
);
"""
_FIELDS = ("pid", "create_time", "boot_id", "state", "restarts", "reason", "host")


_INDEXES = {
    "outbox_pending": "CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (seq)"
    " WHERE outcome IS NULL",
    "outbox_settled": "CREATE INDEX IF NOT EXISTS outbox_settled ON outbox (settled_at)"
    " WHERE settled_at IS NOT NULL",
}


def _upgrade(db: sqlite3.Connection) -> None:
    """Bring a file written by an earlier version up to date: records name their host;
    settled prompts say when (so they can be pruned), and both queues are indexed. One
    transaction, so two processes opening an old file at once do not both alter it, and
    only when something is missing: opening an up-to-date file takes no write lock, so a
    restarting daemon is not held up by another process's long write (issue 26)."""
    if _up_to_date(db):
        return
    with immediate(db):
        if "host" not in _columns(db, "records"):
            db.execute("ALTER TABLE records ADD COLUMN host TEXT")
        if "extra" not in _columns(db, "records"):
            db.execute("ALTER TABLE records ADD COLUMN extra TEXT")
        if "settled_at" not in _columns(db, "outbox"):
            db.execute("ALTER TABLE outbox ADD COLUMN settled_at REAL")
            db.execute("UPDATE outbox SET settled_at = ? WHERE outcome IS NOT NULL", (time.time(),))
        for create in _INDEXES.values():
            db.execute(create)


def _up_to_date(db: sqlite3.Connection) -> bool:
    indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    return (
        {"host", "extra"} <= _columns(db, "records")
        and "settled_at" in _columns(db, "outbox")
        and set(_INDEXES) <= indexes
    )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


class SqliteEpochStore(SqliteFile, FencedStore, schema=_SCHEMA, kind="epochs"):
    """The embedded ``EpochStore``: one SQLite file, shared safely by processes on one host.

    Args:
        path: the database file (created with its tables if missing).
        busy_timeout: seconds a writer waits for another process's transaction.
        keep_settled: seconds (at least) a settled prompt's id and outcome are kept, during
            which enqueuing its id again is a no-op; a later ``settle`` deletes them (by the
            wall clock: a jump forward shortens the window).

    Example:
        ```python
        store = tether.SqliteEpochStore("state/epochs.sqlite3")
        epoch = await store.bump("s1")
        await store.check("s1", epoch)
        ```
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        busy_timeout: float = 30.0,
        keep_settled: float = 86_400.0,
    ) -> None:
        super().__init__(path, busy_timeout=busy_timeout, upgrade=_upgrade)
        self._reads = Database(
            path, _SCHEMA, name=f"{self.KIND} reads", busy_timeout=busy_timeout,
            upgrade=_upgrade,
        )  # fmt: skip
        """Reads on a connection and a thread of their own: in WAL mode they never wait for
        a lock, so a write queued behind another process's lock never holds up a read."""
        self.keep_settled = keep_settled
        """Seconds (at least) a settled prompt's id and outcome are kept (see the class)."""
        self._identity: str | None = None
        self._bumps: GroupCommit[str, int] = GroupCommit(self._bump_all)
        self._inline: InlineBumps | None = None
        self._inline_tried = False

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self._database.run(fn)
        except sqlite3.Error as exc:
            raise StoreUnavailable(os.fspath(self.path), f"{type(exc).__name__}: {exc}") from exc

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self._reads.run(fn)
        except sqlite3.Error as exc:
            raise StoreUnavailable(os.fspath(self.path), f"{type(exc).__name__}: {exc}") from exc

    async def bump(self, session: str) -> int:
        """Issue the next epoch of ``session`` (1 for a new one), durably. Bumps made while
        another is committing share the next transaction (one sync of the disk for all)."""
        return await self._bumps.submit(session)

    async def _bump_all(self, sessions: Sequence[str]) -> list[int]:
        inline = await self._inline_bumps()
        if inline is not None and not inline.checkpoint_due:
            try:
                epochs = await inline.bump(sessions, self._database.worker)
            except (sqlite3.Error, OSError) as exc:
                await self._close_inline()  # the worker's connection goes on alone
                path = os.fspath(self.path)
                raise StoreUnavailable(path, f"{type(exc).__name__}: {exc}") from exc
            if epochs is not None:
                return epochs
        checkpoint = inline is not None and inline.checkpoint_due

        def bump(db: sqlite3.Connection) -> list[int]:
            if checkpoint:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            with immediate(db):
                return [int(db.execute(BUMP, (s,)).fetchone()[0]) for s in sessions]

        epochs = await self._run(bump)
        if checkpoint and inline is not None:
            inline.checkpointed()
        return epochs

    async def _inline_bumps(self) -> InlineBumps | None:
        """The trio thread's connection (ADR 0030), opened on first use where it can be."""
        if not self._inline_tried:
            self._inline_tried = True
            if _aio.wanted():
                path = os.fspath(self.path)
                self._inline = await self._run(lambda db: InlineBumps.open(path, db))
        return self._inline

    async def _close_inline(self) -> None:
        inline, self._inline = self._inline, None
        if inline is not None:
            await self._database.worker.run(inline.close)

    async def aclose(self) -> None:
        """Close both connections and stop the worker thread; they come back if used again."""
        await self._close_inline()
        self._inline_tried = False
        await self._reads.aclose()
        await super().aclose()

    async def current(self, session: str) -> int | None:
        """The latest epoch issued for ``session``, or ``None``."""
        return await self._read(lambda db: _current(db, session))

    async def record(self, session: str) -> SessionRecord | None:
        """The record last saved for ``session``, or ``None``."""

        def read(db: sqlite3.Connection) -> SessionRecord | None:
            row = db.execute(
                f"SELECT epoch, extra, {', '.join(_FIELDS)} FROM records WHERE session = ?",
                (session,),
            ).fetchone()
            if row is None:
                return None
            values = dict(zip(_FIELDS, row[2:], strict=True))
            values.update(json.loads(row[1]) if row[1] else {})
            return SessionRecord.from_dict({**values, "epoch": row[0]})

        return await self._read(read)

    async def save(self, session: str, record: SessionRecord, *, epoch: int) -> None:
        """Store ``record`` for ``session`` as written by the holder of ``epoch``.

        The epoch is compared in the same transaction as the write (fencing on the write path):
        a holder of an older epoch cannot overwrite what a newer one saved.

        Raises:
            Superseded: ``epoch`` is older than the current epoch.
        """

        def save(db: sqlite3.Connection) -> None:
            with immediate(db):
                fence_write(session, epoch, _current(db, session))
                values = tuple(getattr(record, field) for field in _FIELDS)
                extra = json.dumps(record.extra())
                db.execute(
                    f"INSERT OR REPLACE INTO records (session, {', '.join(_FIELDS)}, extra,"
                    f" epoch) VALUES (?, {', '.join('?' for _ in _FIELDS)}, ?, ?)",
                    (session, *values, extra, epoch),
                )

        await self._run(save)

    async def sessions(self) -> list[str]:
        """Every session with a saved record, sorted."""
        rows = await self._read(
            lambda db: db.execute("SELECT session FROM records ORDER BY session").fetchall()
        )
        return [str(row[0]) for row in rows]

    async def enqueue(self, prompt: QueuedPrompt) -> None:
        """Queue ``prompt`` durably (committed before this returns); an id already queued for
        the session is left as it is."""
        row = (prompt.session, prompt.id, prompt.text, json.dumps(prompt.meta), prompt.attempts)
        await self._run(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO outbox (session, id, text, meta, attempts)"
                " VALUES (?, ?, ?, ?, ?)",
                row,
            )
        )

    async def attempted(self, session: str, prompt_id: str) -> None:
        """Count one more delivery attempt of a queued prompt."""
        await self._run(
            lambda db: db.execute(
                "UPDATE outbox SET attempts = attempts + 1 WHERE session = ? AND id = ?",
                (session, prompt_id),
            )
        )

    async def settle(self, session: str, prompt_id: str, outcome: str) -> None:
        """Record the prompt's outcome (the first one; its text is dropped, the id kept for
        ``keep_settled``), and delete what was settled longer ago: one transaction."""

        def settle(db: sqlite3.Connection) -> None:
            now = time.time()
            with immediate(db):
                db.execute(
                    "UPDATE outbox SET outcome = ?, settled_at = ?, text = '', meta = '{}'"
                    " WHERE session = ? AND id = ? AND outcome IS NULL",
                    (outcome, now, session, prompt_id),
                )
                db.execute("DELETE FROM outbox WHERE settled_at < ?", (now - self.keep_settled,))

        await self._run(settle)

    async def pending(self) -> list[QueuedPrompt]:
        """Every queued prompt without an outcome, oldest first."""
        rows = await self._read(
            lambda db: db.execute(
                "SELECT session, id, text, meta, attempts FROM outbox"
                " WHERE outcome IS NULL ORDER BY seq"
            ).fetchall()
        )
        return [
            QueuedPrompt(session, prompt_id, text, json.loads(meta), attempts)
            for session, prompt_id, text, meta, attempts in rows
        ]

    async def identity(self) -> str:
        """The store's id: one generated on first use and kept in the file, and the file's
        own identity (device and inode). A copy of the file is another store: a daemon
        started on it adopts and sweeps none of the original's harnesses (issue 26)."""

        def stored(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
            return None if row is None else str(row[0])

        def create(db: sqlite3.Connection) -> str:
            db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)",
                (uuid.uuid4().hex[:16],),
            )
            value = stored(db)
            assert value is not None
            return value

        if self._identity is None:
            value = await self._read(stored) or await self._run(create)
            try:
                info = os.stat(self.path)
            except OSError as exc:
                raise StoreUnavailable(os.fspath(self.path), str(exc)) from exc
            self._identity = f"{value}-{info.st_dev:x}-{info.st_ino:x}"
        return self._identity

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold ``<path>.daemon.lock`` (an ``flock``, so it dies with its holder, holding the
        holder's pid) for the block: one daemon per file.

        Raises:
            StoreInUse: another process holds it, naming its pid.
            StoreUnavailable: the lock file cannot be opened or written.
        """
        fd = _lock_daemon(os.fspath(self.path))
        try:
            yield
        finally:
            os.close(fd)


def _current(db: sqlite3.Connection, session: str) -> int | None:
    row = db.execute("SELECT epoch FROM epochs WHERE session = ?", (session,)).fetchone()
    return None if row is None else int(row[0])


def _lock_daemon(path: str) -> int:
    lock_path = f"{path}.daemon.lock"
    prepare_file(path)  # the directory is checked before the lock file is made in it
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreUnavailable(path, f"cannot open {lock_path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StoreInUse(path, holder) from None
        raise StoreUnavailable(path, f"cannot lock {lock_path}: {exc.strerror}") from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise StoreUnavailable(path, f"cannot write {lock_path}: {exc.strerror}") from exc
    return fd


def _holder(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
