"""``tether transcript show PATH`` and ``tether transcript repair PATH``."""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

import trio

from ..journal import Entry, Event, JournalError, Message, ToolCall, ToolResult, Transcript, scan


def _brief(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _line(entry: Entry, answered: set[str]) -> str:
    head = f"{entry.seq:>6}  {entry.ts}  "
    if isinstance(entry, ToolCall):
        mark = "" if entry.id in answered else "   <- DANGLING: no result"
        return f"{head}call    {entry.name}({_brief(entry.args)}) [{entry.id}]{mark}"
    if isinstance(entry, ToolResult):
        reason = f" ({entry.reason})" if entry.reason else ""
        return f"{head}result  {entry.status}{reason}: {_brief(entry.output)} [{entry.call_id}]"
    if isinstance(entry, Message):
        return f"{head}{entry.role:<7} {_brief(entry.content)}"
    assert isinstance(entry, Event)
    return f"{head}event   {entry.kind} {_brief(entry.data)}"


def show(path: str, out: TextIO) -> int:
    """Print the transcript readably, dangling calls marked; changes nothing. Exit status."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        print(f"tether transcript: {path}: {os.strerror(exc.errno or 0)}", file=out)
        return 1
    found = scan(data)
    entries = found.entries
    answered = {e.call_id for e in entries if isinstance(e, ToolResult)}
    for entry in entries:
        print(_line(entry, answered), file=out)
    dangling = sum(isinstance(e, ToolCall) and e.id not in answered for e in entries)
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
    """Open the transcript (which repairs it) and say what was done. Exit status."""
    try:
        async with await Transcript.open(path, create=False) as transcript:
            report = transcript.repair
            dangling = len(transcript.dangling())
            total = len(transcript.entries)
    except JournalError as exc:
        print(f"tether transcript: {exc}", file=out)
        return 1
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


def run(command: str, path: str, out: TextIO) -> int:
    """Dispatch ``show`` or ``repair``."""
    if command == "show":
        return show(path, out)
    return trio.run(repair, path, out)
