"""``Database``: one SQLite file used from trio, every call on its own worker thread.

The epoch store, the liveness ledger and the job store each keep one file: opened lazily with
their schema, WAL, a busy timeout so processes queue instead of failing, and the ``synchronous``
level each one needs; every call runs on one ``Worker`` thread, in order, so the trio run never
waits on disk and one connection is never used from two threads.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from os import PathLike
from typing import ClassVar, Self, TypeVar

from ._private import check_owned, create_private
from ._worker import Worker

T = TypeVar("T")


class Database:
    """A lazily opened SQLite connection and the thread that uses it."""

    def __init__(
        self,
        path: str | PathLike[str],
        schema: str,
        *,
        name: str,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        upgrade: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.path = path
        self._schema = schema
        self._upgrade = upgrade
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._db: sqlite3.Connection | None = None
        self.worker = Worker(f"tether {name} {path}")
        """The thread every call on this file runs on, in order."""

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the worker thread; what it returns or raises."""
        return await self.worker.run(self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            prepare_file(self.path)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            db.executescript(self._schema)
            if self._upgrade is not None:
                self._upgrade(db)
            self._db = db
        return fn(self._db)

    async def aclose(self) -> None:
        """Close the connection and stop the thread; both come back if the file is used again."""

        def close(db: sqlite3.Connection) -> None:
            db.close()
            self._db = None

        if self._db is not None:
            await self.run(close)
        self.worker.stop()


class SqliteFile:
    """The base of tether's SQLite-backed stores (the epoch store, the job store, the ledger):
    one ``Database`` on one file, a ``repr`` that names it, and ``aclose`` / ``async with``.

    A subclass names its schema and kind in its class statement
    (``class JobStore(SqliteFile, schema=..., kind="jobs")``) and passes what differs
    (``synchronous``, ``busy_timeout``, an ``upgrade``) to ``__init__``.
    """

    SCHEMA: ClassVar[str]
    """The SQL that creates the store's tables."""
    KIND: ClassVar[str]
    """What the store holds (``epochs``, ``jobs``, ``ledger``): its worker thread's name."""

    def __init_subclass__(cls, *, schema: str, kind: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.SCHEMA = schema
        cls.KIND = kind

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        upgrade: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.path = path
        self._database = Database(
            path,
            self.SCHEMA,
            name=self.KIND,
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            upgrade=upgrade,
        )

    def __repr__(self) -> str:
        return f"<tether.{type(self).__name__} {str(self.path)!r}>"

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._database.run(fn)

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread; both come back if used again."""
        await self._database.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` if the block raises: the write lock
    is taken up front, so two processes never read the same value and both write the next."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def prepare_file(path: str | os.PathLike[str]) -> None:
    """Before SQLite opens ``path``: refuse a directory another user owns or can write to (it
    could hold a link to a file of the victim's), and create the file 0600 (ADR 0044).

    Raises:
        UnsafeDirectory: naming the directory and what is wrong with it.
    """
    name = os.fspath(path)
    if name == ":memory:" or name.startswith("file:"):
        return
    check_owned(os.path.dirname(os.path.abspath(name)), "store directory", private=False)
    create_private(name)
