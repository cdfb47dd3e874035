"""The ``tether ps`` table: one row per session, every column but the last free of spaces (so
``awk '{print $2}'`` is the state), ``-`` where a value is missing. ``LAST_TURN`` is ``ok`` or
the last turn's failure (``http:429``) until a turn succeeds. The last column is the
last event and, for a stalled session, where its engine waits."""

from __future__ import annotations

from typing import Any

HEADER = (
    "SESSION", "STATE", "EPOCH", "PID", "HEARTBEAT", "ACTIVITY", "SILENCE", "THRESHOLD",
    "RESTARTS", "NEXT", "LAST_TURN", "LAST_EVENT",
)  # fmt: skip


def table(rows: list[dict[str, Any]], *, headers: bool = True) -> str:
    """The rows as aligned text (the last column, the last event, may hold spaces)."""
    lines: list[tuple[str, ...]] = [HEADER] if headers else []
    lines += [_cells(row) for row in rows]
    if not lines:
        return ""
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False))
        + "  "
        + line[-1]
        + "\n"
        for line in lines
    )


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    threshold = row.get("threshold")
    source = row.get("threshold_source") or ""
    return (
        row["session"],
        row["state"],
        _or_dash(row["epoch"]),
        _or_dash(row["pid"]),
        _seconds(row["heartbeat_age"], 1),
        (row.get("activity") or "-").replace(" on ", ":").replace(" ", ":"),
        _seconds(row.get("silence"), 0),
        "-" if threshold is None else f"{threshold:g}s" + (f"({source})" if source else ""),
        str(row["restarts"]),
        _seconds(row.get("next_attempt"), 1),
        row.get("last_turn") or "-",
        "; ".join(part for part in (row["last_event"], row.get("waits")) if part) or "-",
    )


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _seconds(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}s"
