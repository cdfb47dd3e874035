"""Transcript entries: four frozen attrs classes and their one JSON-lines codec.

Every line is one JSON object with ``type``, ``id``, ``seq`` and ``ts`` first, then the fields of
its type; ``docs/transcript.md`` is the reference.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any, ClassVar, Final

import attrs

STATUSES: Final = ("ok", "error", "aborted")


class EntryError(ValueError):
    """A line that is not a valid transcript entry."""


@attrs.frozen
class Message:
    """A message of the conversation (``role`` is ``user``, ``assistant``, ``system``...)."""

    id: str
    seq: int
    ts: str
    role: str
    content: str
    type: ClassVar[str] = "message"


@attrs.frozen
class ToolCall:
    """A tool call, written and fsynced before the tool runs."""

    id: str
    seq: int
    ts: str
    name: str
    args: dict[str, Any]
    type: ClassVar[str] = "tool_call"


@attrs.frozen
class ToolResult:
    """The terminal result of a tool call: ``ok``, ``error`` or ``aborted`` (with a reason)."""

    id: str
    seq: int
    ts: str
    call_id: str
    status: str
    output: Any
    reason: str | None = None
    type: ClassVar[str] = "tool_result"


@attrs.frozen
class Event:
    """Something that happened to the transcript or the session (``kind`` says what)."""

    id: str
    seq: int
    ts: str
    kind: str
    data: dict[str, Any]
    type: ClassVar[str] = "event"


Entry = Message | ToolCall | ToolResult | Event

_CLASSES: dict[str, type[Entry]] = {
    "message": Message,
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "event": Event,
}
_Expected = type | tuple[type, ...] | None
_FIELDS: dict[str, tuple[tuple[str, _Expected], ...]] = {
    "message": (("role", str), ("content", str)),
    "tool_call": (("name", str), ("args", dict)),
    "tool_result": (
        ("call_id", str),
        ("status", str),
        ("output", None),
        ("reason", (str, type(None))),
    ),
    "event": (("kind", str), ("data", dict)),
}


def new_id(prefix: str) -> str:
    """A fresh entry id: ``call_3f2a...``."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def now() -> str:
    """The wall clock in ISO 8601 UTC, to the microsecond."""
    return (
        datetime.datetime.now(datetime.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def encode(entry: Entry) -> bytes:
    """One line (with its newline) for ``entry``."""
    record: dict[str, Any] = {"type": entry.type, "id": entry.id, "seq": entry.seq, "ts": entry.ts}
    for name, _ in _FIELDS[entry.type]:
        value = getattr(entry, name)
        if value is not None or name != "reason":
            record[name] = value
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Entry:
    """The entry on ``line`` (without its newline).

    Raises:
        EntryError: not JSON, not an object, an unknown ``type``, a missing or mistyped field.
    """
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EntryError(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise EntryError("not a JSON object")
    kind = record.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise EntryError(f"unknown entry type {kind!r}")
    fields = _FIELDS[kind]
    values: dict[str, Any] = {}
    for name, expected in (("id", str), ("seq", int), ("ts", str), *fields):
        value = record.get(name)
        if name == "reason" and name not in record:
            continue
        if name not in record or (expected is not None and not isinstance(value, expected)):
            raise EntryError(f"{kind}: field {name!r} is missing or not {_describe(expected)}")
        values[name] = value
    if isinstance(values["seq"], bool):
        raise EntryError(f"{kind}: field 'seq' is not an integer")
    if kind == "tool_result" and values["status"] not in STATUSES:
        raise EntryError(f"tool_result: status {values['status']!r} is not one of {STATUSES}")
    return _CLASSES[kind](**values)


def _describe(expected: _Expected) -> str:
    if expected is None:
        return "present"
    classes = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(cls.__name__ for cls in classes)
