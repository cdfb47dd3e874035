"""Transcript entries: four frozen attrs classes and their one JSON-lines codec.

Every line is one JSON object with ``type``, ``id``, ``seq`` and ``ts`` first, then the fields of
its type; ``docs/transcript.md`` is the reference.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from typing import Any, ClassVar, Final

import attrs

STATUSES: Final = ("ok", "error", "aborted", "interrupted", "result_lost")
"""A result's status: ``ok`` and ``error`` from the tool; ``aborted``: the harness stopped it on
purpose (a timeout, a stall); ``interrupted``: something outside the call cut it short (a
signal and its sender, supersession, a lost daemon, an unclean shutdown); ``result_lost``: it
finished, but its result line was damaged (the quarantine file keeps the bytes)."""
MAX_DEPTH: Final = 64
"""The deepest nesting of arrays and objects an entry may hold (the entry's object is 1):
deeper values are refused on write, so every line written parses again on any stack."""


class EntryError(ValueError):
    """A line that is not a valid transcript entry."""


@attrs.frozen
class Message:
    """A message of the conversation (``role`` is ``user``, ``assistant``, ``system``...)."""

    id: str
    """The entry's id (``msg_`` and 16 hex digits)."""
    seq: int
    """Its place in the transcript, from 1."""
    ts: str
    """When it was written (UTC, ISO 8601)."""
    role: str
    """``user``, ``assistant`` or ``system``."""
    content: str
    """The text."""
    prompt_id: str | None = None
    """The id of the prompt this message records, for a user message the harness wrote as its
    engine took a prompt (``None``: any other message); at most one message per id."""
    type: ClassVar[str] = "message"
    """``message``, the entry's tag in the file."""


@attrs.frozen
class ToolCall:
    """A tool call, written and fsynced before the tool runs."""

    id: str
    """The call's id (``call_`` and 16 hex digits), named by its result."""
    seq: int
    """Its place in the transcript, from 1."""
    ts: str
    """When it was written (UTC, ISO 8601)."""
    name: str
    """The tool's name."""
    args: dict[str, Any]
    """The tool's arguments."""
    awaiting: str | None = None
    """``approval``: the call waits for a person's decision, which may come after any number
    of restarts, so it is never sealed (``None``: an ordinary call)."""
    type: ClassVar[str] = "tool_call"
    """``tool_call``, the entry's tag in the file."""


@attrs.frozen
class ToolResult:
    """The terminal result of a tool call: a status of ``STATUSES`` (with a reason when it is
    not ``ok`` or ``error``)."""

    id: str
    """The entry's id (``result_`` and 16 hex digits)."""
    seq: int
    """Its place in the transcript, from 1."""
    ts: str
    """When it was written (UTC, ISO 8601)."""
    call_id: str
    """The id of the call it answers."""
    status: str
    """``ok``, ``error``, ``aborted``, ``interrupted`` or ``result_lost``."""
    output: Any
    """What the tool returned (``None`` when it did not finish)."""
    reason: str | None = None
    """Why the call did not finish, when it did not."""
    type: ClassVar[str] = "tool_result"
    """``tool_result``, the entry's tag in the file."""


@attrs.frozen
class Event:
    """Something that happened to the transcript or the session (``kind`` says what)."""

    id: str
    """The entry's id (``event_`` and 16 hex digits)."""
    seq: int
    """Its place in the transcript, from 1."""
    ts: str
    """When it was written (UTC, ISO 8601)."""
    kind: str
    """What happened (``quarantined``, ``tool_stalled``, ...)."""
    data: dict[str, Any]
    """Its details."""
    type: ClassVar[str] = "event"
    """``event``, the entry's tag in the file."""


Entry = Message | ToolCall | ToolResult | Event
"""Any transcript entry."""

_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("role", "content", "prompt_id"),
    "tool_call": ("name", "args", "awaiting"),
    "tool_result": ("call_id", "status", "output", "reason"),
    "event": ("kind", "data"),
}
"""The fields each type adds after ``type``, ``id``, ``seq`` and ``ts``, in line order."""
_OMITTED_IF_NONE: Final = frozenset({"reason", "prompt_id", "awaiting"})
"""Fields left off the line while they are ``None`` (a reader takes a missing one as ``None``)."""


def new_id(prefix: str) -> str:
    """A fresh entry id: ``call_3f2a...``."""
    return f"{prefix}_{os.urandom(8).hex()}"


def now() -> str:
    """The wall clock in ISO 8601 UTC, to the microsecond."""
    return (
        datetime.datetime.now(datetime.UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode(entry: Entry) -> bytes:
    """One line (with its newline) for ``entry``.

    Raises:
        ValueError: a value nests deeper than ``MAX_DEPTH``, or is not JSON (a cycle).
    """
    record: dict[str, Any] = {"type": entry.type, "id": entry.id, "seq": entry.seq, "ts": entry.ts}
    for name in _FIELDS[entry.type]:
        value = getattr(entry, name)
        if value is not None or name not in _OMITTED_IF_NONE:
            record[name] = value
            if type(value) is dict or type(value) is list:
                _check_depth(entry.type, name, value)
    return _ENCODER.encode(record).encode() + b"\n"


def _check_depth(kind: str, name: str, value: Any) -> None:
    """Refuse a value nested deeper than ``MAX_DEPTH``: an iterative walk that stops at the
    limit, so a hostile value costs no recursion."""
    children = value.values() if type(value) is dict else value
    if not any(type(child) is dict or type(child) is list for child in children):
        return  # flat: the common case
    stack: list[tuple[Any, int]] = [(value, 2)]
    while stack:
        item, level = stack.pop()
        if type(item) is dict or type(item) is list:
            if level > MAX_DEPTH:
                raise ValueError(f"{kind}: field {name!r} nests deeper than {MAX_DEPTH} levels")
            children = item.values() if type(item) is dict else item
            stack.extend((child, level + 1) for child in children)


def decode(line: bytes) -> Entry:
    """The entry on ``line`` (without its newline).

    Raises:
        EntryError: not JSON, not an object, an unknown ``type``, a missing or mistyped field.
    """
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EntryError(f"not JSON: {exc}") from None
    except RecursionError:
        raise EntryError("not JSON this reader can parse: nested too deep") from None
    return from_record(record)


def from_record(record: Any) -> Entry:
    """The entry a decoded JSON value describes.

    Raises:
        EntryError: not an object, an unknown ``type``, a missing or mistyped field.
    """
    if type(record) is not dict:
        raise EntryError("not a JSON object")
    tag = record.get("type")
    build = _BUILDERS.get(tag) if type(tag) is str else None
    if build is None:
        shown = repr(tag)
        raise EntryError(f"unknown entry type {shown if len(shown) <= 40 else shown[:39] + '...'}")
    try:
        return build(record)
    except KeyError as exc:
        raise EntryError(f"{tag}: field {exc.args[0]!r} is missing") from None


def _check(kind: str, name: str, value: Any, expected: type) -> Any:
    # ``type() is`` rather than isinstance: JSON gives exact types, and bool is not an int here.
    if type(value) is not expected:
        raise EntryError(f"{kind}: field {name!r} is not {expected.__name__}")
    return value


def _head(kind: str, r: dict[str, Any]) -> tuple[str, int, str]:
    return (
        _check(kind, "id", r["id"], str),
        _check(kind, "seq", r["seq"], int),
        _check(kind, "ts", r["ts"], str),
    )


def _message(r: dict[str, Any]) -> Message:
    prompt_id = r.get("prompt_id")
    if prompt_id is not None:
        _check("message", "prompt_id", prompt_id, str)
    return Message(
        *_head("message", r),
        _check("message", "role", r["role"], str),
        _check("message", "content", r["content"], str),
        prompt_id,
    )


def _tool_call(r: dict[str, Any]) -> ToolCall:
    awaiting = r.get("awaiting")
    if awaiting is not None:
        _check("tool_call", "awaiting", awaiting, str)
    return ToolCall(
        *_head("tool_call", r),
        _check("tool_call", "name", r["name"], str),
        _check("tool_call", "args", r["args"], dict),
        awaiting,
    )


def _tool_result(r: dict[str, Any]) -> ToolResult:
    status = _check("tool_result", "status", r["status"], str)
    if status not in STATUSES:
        raise EntryError(f"tool_result: status {status!r} is not one of {STATUSES}")
    reason = r.get("reason")
    if reason is not None:
        _check("tool_result", "reason", reason, str)
    call_id = _check("tool_result", "call_id", r["call_id"], str)
    return ToolResult(*_head("tool_result", r), call_id, status, r["output"], reason)


def _event(r: dict[str, Any]) -> Event:
    return Event(
        *_head("event", r),
        _check("event", "kind", r["kind"], str),
        _check("event", "data", r["data"], dict),
    )


_BUILDERS: dict[str, Callable[[dict[str, Any]], Entry]] = {
    "message": _message,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "event": _event,
}
