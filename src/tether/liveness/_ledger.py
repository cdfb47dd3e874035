"""``Ledger``: every finished turn's and tool run's figures in SQLite, and the thresholds they
justify.

Two tables, ``turns`` and ``tools``, in their own file or in the epoch store's (WAL lets them
share). Healthy means the turn ended ``completed``, or the tool run ``ok`` (it ended on its own,
whatever its exit code); stale, interrupted, stalled and timed-out ones are kept for the record
but never lower a threshold.
"""

from __future__ import annotations

from os import PathLike
from typing import TypeVar

from .._sqlite import SqliteFile
from ._stream import TurnStats
from ._thresholds import Threshold, Thresholds, derive

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    route     TEXT NOT NULL,
    ttft      REAL,
    max_gap   REAL NOT NULL,
    parts     INTEGER NOT NULL,
    outcome   TEXT NOT NULL,
    suspended REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_route ON turns (route, outcome);
CREATE TABLE IF NOT EXISTS tools (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    max_silence REAL NOT NULL,
    outcome     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tools_by_name ON tools (name, outcome);
"""


class Ledger(SqliteFile, schema=_SCHEMA, kind="ledger"):
    """Turn statistics per route, and ``thresholds(route)`` derived from the healthy ones."""

    def __init__(self, path: str | PathLike[str]) -> None:
        super().__init__(path)

    async def record(self, stats: TurnStats) -> None:
        """Keep one finished turn."""
        row = (
            stats.route,
            stats.ttft,
            stats.max_gap,
            stats.parts,
            stats.outcome,
            stats.suspended,
        )
        await self._run(
            lambda db: db.execute(
                "INSERT INTO turns (route, ttft, max_gap, parts, outcome, suspended)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    async def turns(self, route: str) -> list[TurnStats]:
        """Every turn recorded for ``route``, oldest first."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT route, ttft, max_gap, parts, outcome, suspended FROM turns"
                " WHERE route = ? ORDER BY seq",
                (route,),
            ).fetchall()
        )
        return [TurnStats(*row) for row in rows]

    async def thresholds(self, route: str) -> Thresholds:
        """The route's thresholds from its healthy (``completed``) turns."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT ttft, max_gap FROM turns WHERE route = ? AND outcome = 'completed'",
                (route,),
            ).fetchall()
        )
        return Thresholds(
            route,
            derive([ttft for ttft, _ in rows if ttft is not None]),
            derive([gap for _, gap in rows]),
        )

    async def record_tool(self, name: str, max_silence: float, outcome: str) -> None:
        """Keep one finished run of tool ``name``: its largest silence and how it ended
        (``ok``, ``stalled``, ``timed_out``, ``aborted``)."""
        row = (name, max_silence, outcome)
        await self._run(
            lambda db: db.execute(
                "INSERT INTO tools (name, max_silence, outcome) VALUES (?, ?, ?)", row
            )
        )

    async def tool_threshold(self, name: str) -> Threshold:
        """How long tool ``name`` may go without progress, from its healthy runs' largest
        silences (``DEFAULT`` until there is evidence; never below what a healthy run did)."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT max_silence FROM tools WHERE name = ? AND outcome = 'ok'", (name,)
            ).fetchall()
        )
        return derive([silence for (silence,) in rows])
