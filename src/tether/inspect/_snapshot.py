"""``snapshot()``: the running trio run's task tree (or the asyncio loop's tasks), what each task
waits on, and the sections its program registered (a harness adds its turn, its open tool calls
and its transcript's last entries), as one bounded JSON document.

Nothing is installed and nothing runs until someone asks: no instrument, no signal handler, no
per-task bookkeeping, so being inspectable costs a program nothing. A snapshot is read in one
pass on the loop's thread (no task switch, so no task moves while it is read). Its size is
bounded however many tasks there are: sibling tasks with the same line and the same wait are one
entry with a count, and past ``max_entries`` entries the rest are only counted.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio.lowlevel
import trio

from .. import _backend
from ._render import line_of
from ._tasks import ROOT_NAMES, row, walk

logger = logging.getLogger("tether.inspect")

VERSION = 1
"""The snapshot format's version (its ``version`` field)."""
MAX_ENTRIES = 400
"""Task entries a snapshot shows at most (identical waits already grouped)."""
NAMES_SHOWN = 3
"""Task names an entry of grouped tasks lists."""
TIME_BUDGET = 0.5
"""Seconds a snapshot spends reading tasks; those left are counted, not read (about 40,000
tasks fit on the 2-core machine here)."""

Section = Callable[[], Any]
"""A registered part of a snapshot: called on the trio thread, returns JSON values."""

_SECTIONS: anyio.lowlevel.RunVar[dict[str, Section]] = anyio.lowlevel.RunVar("tether inspect")


def add_section(name: str, section: Section) -> None:
    """Add ``section()``'s value to every snapshot of this run (trio's or asyncio's), under
    ``name`` (a harness adds ``turn``, ``tools`` and ``transcript``). It must be quick and must
    not block: it runs inside the snapshot, on the loop's thread."""
    try:
        sections = _SECTIONS.get()
    except LookupError:
        sections = {}
        _SECTIONS.set(sections)
    sections[name] = section


def snapshot(*, max_entries: int = MAX_ENTRIES, time_budget: float = TIME_BUDGET) -> dict[str, Any]:
    """The current run (trio's or asyncio's), now: ``tasks`` (entries in tree order, each with
    ``id``, ``parent``, ``name``, ``count``, ``where`` and ``wait``), ``task_count``, ``omitted``
    (tasks past ``max_entries`` entries, or not read within ``time_budget`` seconds: then
    ``complete`` is false), ``sections``, a one-line ``summary`` and the time it ``took``.
    Call it from a task of the run; no other task runs while it reads.

    Raises:
        RuntimeError: called outside a trio run or an asyncio loop.
    """
    started = time.perf_counter()
    if _backend.on_trio():
        running = trio.lowlevel.current_task()
        found: Iterator[tuple[Any, Any]] = walk()

        def read(task: Any) -> dict[str, Any]:
            return row(task, running, deadlines)
    else:
        from . import _aiotasks

        found = _aiotasks.walk()
        current = _aiotasks.current()

        def read(task: Any) -> dict[str, Any]:
            return _aiotasks.row(task, current)

    entries: dict[tuple[Any, ...], dict[str, Any]] = {}
    group_of: dict[int, int] = {}
    deadlines: dict[int, float] = {}
    total = omitted = 0
    complete = True
    for task, parent in found:
        total += 1
        if not complete or (total % 256 == 0 and time.perf_counter() - started > time_budget):
            complete = False
            omitted += 1
            continue
        parent_id = group_of.get(id(parent)) if parent is not None else None
        if parent is not None and parent_id is None:  # its parent's entry was left out
            omitted += 1
            continue
        info = read(task)
        key = (parent_id, repr(info["where"]), repr(info["wait"]))  # built in one field order
        entry = entries.get(key)
        if entry is None:
            if len(entries) >= max_entries:
                omitted += 1
                continue
            entry = {"id": len(entries) + 1, "parent": parent_id, "name": info["name"],
                     "count": 0, "names": [], **info}  # fmt: skip
            entries[key] = entry
        entry["count"] += 1
        if len(entry["names"]) < NAMES_SHOWN and info["name"] not in entry["names"]:
            entry["names"].append(info["name"])
        group_of[id(task)] = entry["id"]
    tasks = list(entries.values())
    return {
        "version": VERSION,
        "pid": os.getpid(),
        "time": time.time(),
        "task_count": total,
        "omitted": omitted,
        "complete": complete,
        "tasks": tasks,
        "sections": _sections(),
        "summary": summary(tasks),
        "took": round(time.perf_counter() - started, 6),
    }


def _sections() -> dict[str, Any]:
    try:
        sections = dict(_SECTIONS.get())
    except LookupError:
        return {}
    out: dict[str, Any] = {}
    for name, section in sections.items():
        try:
            out[name] = section()
        except Exception as exc:  # one broken section must not cost the snapshot
            logger.exception("inspect section %r failed", name)
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def summary(tasks: list[dict[str, Any]], focus: str = "engine") -> str:
    """One line: where the task named ``focus`` (else the first task of user code) waits, and
    on what; its innermost waiting descendant if it only waits for its children."""
    chosen = next((t for t in tasks if t["name"] == focus), None)
    if chosen is None:
        chosen = next((t for t in tasks if t["name"] not in ROOT_NAMES and t["where"]), None)
    if chosen is None:
        return "no task waits in user code"
    children = {t["parent"]: t for t in reversed(tasks)}
    while chosen["wait"]["kind"] == "nursery" and chosen["id"] in children:
        chosen = children[chosen["id"]]
    return f"{chosen['name']} waits {line_of(chosen)} on {chosen['wait']['on']}"
