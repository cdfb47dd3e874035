"""``tether transcript show|tail|repair PATH``: read a transcript as a person or a program
would, follow a live one, or repair it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, TextIO

import trio

from ..journal import Entry, Event, JournalError, Message, ToolCall, ToolResult, Transcript, scan
from ..journal._entries import encode

FOLLOW_EVERY = 0.2
"""Seconds between looks at a followed transcript's length (``tail -f`` polls as well)."""


def _brief(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _line(entry: Entry, answered: set[str] | None) -> str:
    """One entry for a person; a call with no result in ``answered`` is marked dangling
    (``None``: a live transcript, whose calls are not yet answered)."""
    head = f"{entry.seq:>6}  {entry.ts}  "
    if isinstance(entry, ToolCall):
        dangling = answered is not None and entry.id not in answered
        mark = "   <- DANGLING: no result" if dangling else ""
        if dangling and entry.awaiting is not None:
            mark = f"   <- awaiting {entry.awaiting}"
        return f"{head}call    {entry.name}({_brief(entry.args)}) [{entry.id}]{mark}"
    if isinstance(entry, ToolResult):
        reason = f" ({entry.reason})" if entry.reason else ""
        return f"{head}result  {entry.status}{reason}: {_brief(entry.output)} [{entry.call_id}]"
    if isinstance(entry, Message):
        return f"{head}{entry.role:<7} {_brief(entry.content)}"
    assert isinstance(entry, Event)
    return f"{head}event   {entry.kind} {_fields(entry.data)}"


WHOLE = frozenset({"failure", "status", "detail", "reason", "why"})
"""Event fields always shown whole: what failed and why (issue 41: a failure's detail was cut
at 60 characters, and ``--json`` or grep was needed to read it)."""


def _fields(data: Any) -> str:
    """An event's data as ``key=value`` pairs, the short ones first and whole (a failure's
    kind and status were cut off behind a long detail); a long one is briefed unless it says
    what failed and why (``WHOLE``)."""
    if not isinstance(data, dict):
        return _brief(data)
    pairs = [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in data.items()]
    pairs.sort(key=lambda pair: len(pair[1]) > 40)  # stable: short ones keep their order
    return " ".join(f"{k}={_brief(v, width=len(v) if k in WHOLE else 60)}" for k, v in pairs)


def _record(entry: Entry) -> dict[str, Any]:
    """The entry as its line's JSON object."""
    record: dict[str, Any] = json.loads(encode(entry))
    return record


EX_NOINPUT = 66
"""sysexits: the transcript does not exist or cannot be read."""


def _read(path: str) -> bytes | None:
    """The file's bytes, or ``None`` with the reason on stderr."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        print(f"tether transcript: {path}: {os.strerror(exc.errno or 0)}", file=sys.stderr)
        return None


def show(path: str, out: TextIO, *, as_json: bool = False) -> int:
    """Print the transcript readably, dangling calls marked (or, ``as_json``, its entries as
    one JSON array); changes nothing. Exit status: 0, 2 damaged, 66 unreadable."""
    data = _read(path)
    if data is None:
        return EX_NOINPUT
    found = scan(data)
    entries = found.entries
    if as_json:
        json.dump([_record(entry) for entry in entries], out, ensure_ascii=False)
        out.write("\n")
        return 0 if found.intact else 2
    answered = {e.call_id for e in entries if isinstance(e, ToolResult)}
    for entry in entries:
        print(_line(entry, answered), file=out)
    dangling = sum(
        isinstance(e, ToolCall) and e.id not in answered and e.awaiting is None for e in entries
    )
    print(f"{len(entries)} entries, {dangling} dangling tool calls", file=out)
    if found.intact:
        return 0
    if found.tail_only and len(found.damage) == 1:
        where = f"{found.damaged_bytes} bytes after entry {len(entries)} are unreadable"
    else:
        spans = ", ".join(f"{d.length} at offset {d.offset}" for d in found.damage[:5])
        more = f" and {len(found.damage) - 5} more" if len(found.damage) > 5 else ""
        where = f"{found.damaged_bytes} bytes are not valid entries ({spans}{more})"
    print(
        f"{where} ({found.reason}); `tether transcript repair {path}` quarantines them",
        file=out,
    )
    return 2


async def repair(path: str, out: TextIO) -> int:
    """Open the transcript (which repairs it) and say what was done, once: the journal's own
    warning of the repair is not shown as well. Exit status."""
    journal = logging.getLogger("tether.journal")
    level = journal.level
    journal.setLevel(logging.ERROR)
    try:
        async with await Transcript.open(path, create=False) as transcript:
            report = transcript.repair
            dangling = len(transcript.dangling())
            total = len(transcript.entries)
    except JournalError as exc:
        print(f"tether transcript: {exc}", file=out)
        return 1
    finally:
        journal.setLevel(level)
    if report is None:
        print(f"{path}: {total} entries, nothing to repair", file=out)
    else:
        print(
            f"{path}: kept {report.kept_entries} entries; moved {report.quarantined_bytes} bytes"
            f" in {len(report.damage)} spans ({report.reason}) to {report.quarantine};"
            " recorded a 'quarantined' event",
            file=out,
        )
    if dangling:
        print(f"{dangling} tool calls have no result; a resume seals them", file=out)
    return 0


def tail(path: str, out: TextIO, *, lines: int, follow: bool, as_json: bool) -> int:
    """Print the last ``lines`` entries, then (``follow``) each whole line appended after,
    until interrupted. Exit status: 0, or 66 if the file cannot be read."""
    data = _read(path)
    if data is None:
        return EX_NOINPUT
    for entry in scan(data).entries[-lines:] if lines > 0 else []:
        _print(entry, out, as_json)
    if not follow:
        return 0
    offset = data.rfind(b"\n") + 1  # a torn last line is shown once it is whole
    try:
        while True:
            offset = _follow(path, offset, out, as_json)
            time.sleep(FOLLOW_EVERY)
    except KeyboardInterrupt:
        return 0


def _follow(path: str, offset: int, out: TextIO, as_json: bool) -> int:
    """Print the whole lines after ``offset``; the offset after them. A file cut shorter (a
    repair) is followed from its new end."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:
                return size
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset  # moved or replaced meanwhile: look again
    whole = data[: data.rfind(b"\n") + 1]
    for entry in scan(whole).entries:
        _print(entry, out, as_json)
    out.flush()
    return offset + len(whole)


def _print(entry: Entry, out: TextIO, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_record(entry), ensure_ascii=False), file=out)
    else:
        print(_line(entry, None), file=out)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Dispatch ``show``, ``tail`` or ``repair``."""
    if args.action == "show":
        return show(args.path, out, as_json=args.json)
    if args.action == "tail":
        return tail(args.path, out, lines=args.lines, follow=args.follow, as_json=args.json)
    return trio.run(repair, args.path, out)
