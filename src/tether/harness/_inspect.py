"""What a harness adds to its snapshots (``tether inspect``): the current turn, every open tool
call with its process tree, and the transcript's last entries; and the bounded answer its
connection loop sends the daemon."""

from __future__ import annotations

from typing import Any

from ..inspect import add_section, snapshot
from ..journal import Transcript
from ..journal._entries import encode as encode_entry
from ..process._waits import processes
from ..wire import MAX_FRAME, FrameTooLarge, Inspection, ProtocolError, encode
from ._tools import Tools
from ._turns import Turns

LAST_ENTRIES = 8
"""Transcript entries a snapshot shows."""
LINE_CHARS = 240
"""Characters of each transcript line, and of each command line, kept."""
PROCESSES = 50
"""Processes of one tool call shown."""
SMALLER = (400, 60, 10)
"""Task entries tried, in turn, until the answer fits in one frame."""
ROOM = MAX_FRAME - 4096
"""The largest answer: the daemon's reply to ``tether inspect`` wraps it in a few fields."""


def register(turns: Turns, tools: Tools, transcript: Transcript) -> None:
    """Add the harness's sections to every snapshot of this trio run."""
    add_section("turn", turns.report)
    add_section("tools", lambda: open_tools(tools))
    add_section("transcript", lambda: last_entries(transcript))


def open_tools(tools: Tools) -> list[dict[str, Any]]:
    """Each open tool call: its name, id, age, silence, threshold and process tree."""
    out = []
    for open_tool in list(tools.open.values()):
        activity, limit = open_tool.activity, open_tool.stall_after
        rows = processes(activity.tree())[:PROCESSES]
        for row in rows:
            row["cmd"] = row["cmd"][:LINE_CHARS]
        out.append({
            "name": open_tool.call.name, "call_id": open_tool.call.id,
            "age": round(activity.clock.now() - activity.started, 3),
            "silence": round(open_tool.silence(), 3),
            "threshold": limit.seconds if limit is not None else None,
            "source": limit.source if limit is not None else "",
            "note": activity.note, "processes": rows,
        })  # fmt: skip
    return out


def last_entries(transcript: Transcript) -> list[dict[str, Any]]:
    """The last entries, each as its JSONL line (cut at ``LINE_CHARS``) with seq and type."""
    entries = transcript.entries[-LAST_ENTRIES:]
    return [
        {"seq": entry.seq, "type": entry.type,
         "line": encode_entry(entry).decode(errors="replace").rstrip("\n")[:LINE_CHARS]}
        for entry in entries
    ]  # fmt: skip


def answer(seq: int) -> Inspection:
    """The answer to ``Inspect(seq)``: a snapshot small enough for one frame (fewer task entries
    until it fits), or one saying why none could be sent."""
    for entries in SMALLER:
        reply = Inspection(seq, snapshot(max_entries=entries))
        try:
            if len(encode(reply)) <= ROOM:
                return reply
        except FrameTooLarge:
            continue
        except ProtocolError as exc:
            return Inspection(seq, {"error": f"the snapshot cannot be sent: {exc.reason}"})
    return Inspection(seq, {"error": "the snapshot is too large for one frame"})
