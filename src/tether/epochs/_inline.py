"""``InlineBumps``: epoch bumps committed on the trio thread and synced by the kernel.

A bump on the store's worker thread costs two cross-CPU wake-ups, as much as its sync (ADR
0030). Here the transaction runs on the trio thread on a second connection that never waits
for a lock (``busy_timeout=0``), syncs no commit (``synchronous=NORMAL``) and never
checkpoints, so it costs some 15 µs of CPU and no disk wait; then the WAL file is
``fdatasync``-ed by the kernel (``tether._aio``) before the epoch is returned, so a returned
epoch is as durable as under ``synchronous=FULL``. The WAL is grown to ``WAL_RESERVE`` bytes of
written zeros once (zeros end a WAL, like the stale frames a restart leaves), so that sync has
no file length and no block allocation to write. A lock held elsewhere (``BUSY``) says "commit
on the worker instead", where the busy timeout queues the bump; so does every
``CHECKPOINT_EVERY``-th bump: the worker's connection (``FULL``) checkpoints the WAL, then
commits, and so restarts the WAL with a synced header.

A bump committed here is visible to other connections before its sync ends. A reader that
sees it can only conclude that an older epoch is stale, which is safe; the epoch itself is
returned to no one until it is durable.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence

from .._aio import KernelSync
from .._sqlite import immediate
from .._util import write_all
from .._worker import Worker

BUMP = (
    "INSERT INTO epochs (session, epoch) VALUES (?, 1)"
    " ON CONFLICT (session) DO UPDATE SET epoch = epoch + 1 RETURNING epoch"
)
CHECKPOINT_EVERY = 512
"""Bumps committed here between two checkpoints (a bump writes a page or two of WAL)."""
WAL_RESERVE = 4 << 20
"""Bytes the WAL is grown to once, ahead of the frames (SQLite checkpoints at about 4 MiB)."""
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class InlineBumps:
    """The trio thread's connection to one epoch store, and the WAL file it syncs."""

    def __init__(self, db: sqlite3.Connection, wal: int, sync: KernelSync) -> None:
        self._db = db
        self._wal = wal
        self._sync = sync
        self._commits = 0

    @property
    def checkpoint_due(self) -> bool:
        """Whether the next bump is the worker's, which checkpoints first."""
        return self._commits >= CHECKPOINT_EVERY

    def checkpointed(self) -> None:
        """The worker has checkpointed the WAL (and committed after it)."""
        self._commits = 0

    @classmethod
    def open(cls, path: str, worker_db: sqlite3.Connection) -> InlineBumps | None:
        """Connect to the store at ``path`` beside the worker's connection ``worker_db`` (the
        schema made), reserve its WAL and probe a kernel sync of it; ``None`` where this cannot
        be had. Blocking: run it on the store's worker."""
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        wal = -1
        try:
            _configure(db)
            wal = os.open(f"{path}-wal", os.O_RDWR | os.O_CLOEXEC)
            _reserve(wal, worker_db)
            _sync_directory(os.path.dirname(os.path.abspath(path)))
            sync = KernelSync.open(wal)
        except (sqlite3.Error, OSError):
            sync = None
        if sync is None:
            if wal >= 0:
                os.close(wal)
            db.close()
            return None
        return cls(db, wal, sync)

    async def bump(self, sessions: Sequence[str], worker: Worker) -> list[int] | None:
        """Issue the next epoch of each session in one transaction, durably; ``None`` (and
        nothing changed) if another connection holds the write lock. Call it shielded from
        cancellation (the store's group commit is): a sync submitted must be answered.

        Raises:
            sqlite3.Error: the transaction failed; nothing changed.
            OSError: the sync failed: the epochs are committed but may not be durable.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in _BUSY:  # BUSY_RECOVERY, BUSY_SNAPSHOT... too
                return None
            raise
        try:
            epochs = [int(db.execute(BUMP, (session,)).fetchone()[0]) for session in sessions]
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._commits += 1
        if not await self._sync.datasync():  # the process's AIO ring is full
            await worker.run(os.fdatasync, self._wal)
        return epochs

    def close(self) -> None:
        """Close the connection (before the worker's, so this one never checkpoints) and the
        WAL's descriptor. Blocking: run it on the store's worker."""
        self._sync.close()
        os.close(self._wal)
        self._db.close()


def _configure(db: sqlite3.Connection) -> None:
    """Never wait for a lock, sync no commit, never checkpoint; open the WAL."""
    db.execute("PRAGMA busy_timeout = 0")
    if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
        raise sqlite3.OperationalError("the store is not in WAL mode")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("SELECT 1 FROM epochs LIMIT 1").fetchall()


def _reserve(wal: int, db: sqlite3.Connection) -> None:
    """Grow the WAL to ``WAL_RESERVE`` with written zeros, durably, holding the write lock (no
    frame can be written meanwhile). Not ``posix_fallocate``: ext4 would convert an unwritten
    extent, a journal commit, at every frame's first write, which is what growing costs."""
    with immediate(db):
        size = os.fstat(wal).st_size
        if size < WAL_RESERVE:
            try:
                write_all(wal, bytes(WAL_RESERVE - size), size)
                os.fsync(wal)
            except OSError:  # a disk too full for it is left as full as it was
                with contextlib.suppress(OSError):
                    os.ftruncate(wal, size)
                raise


def _sync_directory(path: str) -> None:
    """Make the WAL's name durable: the kernel sync covers its data, not its directory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
