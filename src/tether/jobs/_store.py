"""``JobStore``: jobs and planner wakes in one SQLite file, a wake in the same transaction as
the status that calls for it, so a job can never stop without one.
"""

from __future__ import annotations

import json
import sqlite3
from os import PathLike
from typing import Any, TypeVar

import attrs

from .._sqlite import SqliteFile, immediate
from ._model import RUNNING, STOPS, Job

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id     TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    owner  TEXT,
    data   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS wakes (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    job       TEXT NOT NULL,
    status    TEXT NOT NULL,
    reason    TEXT,
    delivered INTEGER NOT NULL DEFAULT 0
);
"""


@attrs.frozen
class Wake:
    """A planner wake waiting to be delivered (or delivered, for the record)."""

    seq: int
    """Its place in the wake queue."""
    job: str
    """The job that stopped."""
    status: str
    """How it stopped."""
    reason: str | None
    """Why."""
    delivered: bool = False
    """Whether the planner has been told."""


class JobStore(SqliteFile, schema=_SCHEMA, kind="jobs"):
    """Jobs by id, their owning controller, and the planner's outbox of wakes."""

    def __init__(self, path: str | PathLike[str]) -> None:
        super().__init__(path)

    async def create(self, job: Job) -> None:
        """Store a new job.

        Raises:
            ValueError: a job with that id exists.
        """

        def create(db: sqlite3.Connection) -> None:
            try:
                db.execute(
                    "INSERT INTO jobs (id, status, data) VALUES (?, ?, ?)",
                    (job.id, job.status, _dump(job)),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"job {job.id!r} exists") from None

        await self._run(create)

    async def load(self, job_id: str) -> Job:
        """The job as last saved.

        Raises:
            KeyError: no such job.
        """
        row = await self._run(
            lambda db: db.execute("SELECT data FROM jobs WHERE id = ?", (job_id,)).fetchone()
        )
        if row is None:
            raise KeyError(job_id)
        return _load(row[0])

    async def save(self, job: Job) -> None:
        """Write the job; if its status is a stop (terminal or blocked) and differs from the
        stored one, queue a planner wake in the same transaction."""

        def save(db: sqlite3.Connection) -> None:
            with immediate(db):
                (before,) = db.execute("SELECT status FROM jobs WHERE id = ?", (job.id,)).fetchone()
                db.execute(
                    "UPDATE jobs SET status = ?, data = ? WHERE id = ?",
                    (job.status, _dump(job), job.id),
                )
                if job.status in STOPS and job.status != before:
                    db.execute(
                        "INSERT INTO wakes (job, status, reason) VALUES (?, ?, ?)",
                        (job.id, job.status, job.reason),
                    )

        await self._run(save)

    async def claim(self, job_id: str, owner: str) -> bool:
        """Make ``owner`` the job's controller if it is running and has none; whether it did."""
        changed = await self._run(
            lambda db: (
                db.execute(
                    "UPDATE jobs SET owner = ? WHERE id = ? AND status = ? AND owner IS NULL",
                    (owner, job_id, RUNNING),
                ).rowcount
            )
        )
        return bool(changed)

    async def release(self, job_id: str, owner: str) -> None:
        """Drop ``owner``'s claim on the job (a no-op if it holds none)."""
        await self._run(
            lambda db: db.execute(
                "UPDATE jobs SET owner = NULL WHERE id = ? AND owner = ?", (job_id, owner)
            )
        )

    async def owners(self) -> dict[str, str | None]:
        """Every running job's owner (``None``: no controller)."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT id, owner FROM jobs WHERE status = ?", (RUNNING,)
            ).fetchall()
        )
        return {job_id: owner for job_id, owner in rows}

    async def wakes(self, *, pending: bool = True) -> list[Wake]:
        """The wakes not yet delivered (or all of them), oldest first."""
        where = "WHERE delivered = 0" if pending else ""
        rows = await self._run(
            lambda db: db.execute(
                f"SELECT seq, job, status, reason, delivered FROM wakes {where} ORDER BY seq"
            ).fetchall()
        )
        return [
            Wake(seq, job, status, reason, bool(done)) for seq, job, status, reason, done in rows
        ]

    async def woken(self, seq: int) -> None:
        """Mark a wake delivered."""
        await self._run(
            lambda db: db.execute("UPDATE wakes SET delivered = 1 WHERE seq = ?", (seq,))
        )


def _dump(job: Job) -> str:
    return json.dumps(attrs.asdict(job), separators=(",", ":"))


def _load(text: str) -> Job:
    fields: dict[str, Any] = json.loads(text)
    fields["routes"] = tuple(fields["routes"])
    return Job(**fields)
