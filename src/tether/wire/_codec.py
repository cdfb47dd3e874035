"""The one codec: a 4-byte big-endian length, then a JSON object whose ``type`` is the tag.

Decoding is strict about what the peer must send (a known ``type``, every field, each of its
JSON type; ``bool`` is not an integer) and lenient about what it may add (unknown fields are
ignored, so a newer peer can extend a message). Before any value is used, the frame is bounded:
containers nest at most ``MAX_DEPTH`` deep, integers fit in 64 bits and numbers are finite, so
no peer can make the reader recurse, overflow a float or allocate a 4,000-digit integer;
whatever goes wrong while decoding, of any exception type, is a ``ProtocolError``.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import attrs

from ._messages import DEFAULTS, FIELD_TYPES, OPTIONAL, TAGS, Message, tag_of

MAX_FRAME = 1 << 20
"""The largest body accepted: 1 MiB."""
MAX_DEPTH = 32
"""The deepest nesting of arrays and objects a frame may hold (the message object is 1)."""
MAX_INT = 2**63 - 1
"""The largest magnitude of an integer in a frame."""
HEADER = struct.Struct(">I")
_INT_DIGITS = len(str(MAX_INT)) + 1  # room for a sign


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame; ``reason`` says what. Only the
    connection it came on is closed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        """What was wrong with the frame."""


class FrameTooLarge(ProtocolError):
    """A frame's body is ``size`` bytes, over the ``limit`` (``MAX_FRAME``)."""

    def __init__(self, reason: str, size: int, limit: int) -> None:
        super().__init__(reason)
        self.size = size
        """The frame's length, in bytes."""
        self.limit = limit
        """The largest frame allowed, in bytes."""


def encode(message: Message) -> bytes:
    """The frame for ``message``: header and body.

    Raises:
        FrameTooLarge: the body would exceed ``MAX_FRAME``.
        ProtocolError: a value nests deeper than ``MAX_DEPTH`` or holds an integer beyond
            ``MAX_INT`` (the peer would refuse it).
    """
    record: dict[str, Any] = {"type": tag_of(type(message))}
    defaults = DEFAULTS[type(message)]
    for name, value in attrs.asdict(message, recurse=False).items():
        if name not in defaults or value != defaults[name]:
            record[name] = value  # a field at its default is left out: earlier peers read it
    problem = _unbounded(record)
    if problem is not None:
        raise ProtocolError(f"{record['type']}: {problem}")
    try:
        body = json.dumps(
            record, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except ValueError as exc:
        raise ProtocolError(f"{record['type']}: {exc}") from None
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(
            f"a {record['type']} frame of {len(body)} bytes exceeds {MAX_FRAME}",
            len(body),
            MAX_FRAME,
        )
    return HEADER.pack(len(body)) + body


def ping_frame(seq: int) -> bytes:
    """``encode(Ping(seq))``, without the general path: the daemon sends a thousand a
    second, and a ping is one integer."""
    if not 0 <= seq <= MAX_INT:
        raise ProtocolError(f"ping: seq {seq} is out of range")
    body = b'{"type":"ping","seq":%d}' % seq
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a header announces.

    Raises:
        FrameTooLarge: it exceeds ``MAX_FRAME``.
    """
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise FrameTooLarge(
            f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit", length, MAX_FRAME
        )
    return int(length)


def decode(body: bytes) -> Message:
    """The message in a frame's body.

    Raises:
        ProtocolError: invalid JSON, not an object, an unknown ``type``, a missing or wrongly
            typed field, nesting deeper than ``MAX_DEPTH``, an integer beyond ``MAX_INT``, or
            anything else that makes the body undecodable.
    """
    try:
        return _decode(body)
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError(f"nested deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # noqa: BLE001 - a peer's bytes must never raise anything else
        raise ProtocolError(f"undecodable frame: {type(exc).__name__}: {exc}") from None


def _decode(body: bytes) -> Message:
    try:
        record = json.loads(body, parse_int=_parse_int)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}") from None
    if type(record) is not dict:
        raise ProtocolError("a frame must hold a JSON object")
    tag = record.get("type")
    cls = TAGS.get(tag) if type(tag) is str else None
    if cls is None:
        raise ProtocolError(f"unknown message type {_brief(tag)}")
    values: dict[str, Any] = {}
    optional = OPTIONAL[cls]
    for name, expected in FIELD_TYPES[cls]:
        if name not in record:
            if name in optional:
                continue
            raise ProtocolError(f"{tag}: missing field {name!r}")
        value: Any = record[name]
        if expected is float and type(value) is int:
            value = float(value)
        if type(value) is not expected or (isinstance(value, float) and not math.isfinite(value)):
            raise ProtocolError(f"{tag}: field {name!r} must be a finite {expected.__name__}")
        if expected is dict:
            problem = _unbounded(value, depth=2)
            if problem is not None:
                raise ProtocolError(f"{tag}: field {name!r}: {problem}")
        values[name] = value
    message: Message = cls(**values)
    return message


def _parse_int(text: str) -> int:
    if len(text) > _INT_DIGITS or abs(value := int(text)) > MAX_INT:
        raise ValueError(f"integer {text[:24]}{'...' if len(text) > 24 else ''} exceeds 64 bits")
    return value


def _unbounded(value: Any, depth: int = 1) -> str | None:
    """What makes ``value`` (at nesting ``depth``) unfit for a frame, or ``None``: the walk is
    iterative and stops at the limit, so it costs no recursion whatever the input; only
    containers go on its stack (a ``ps`` reply of 1,000 rows is 15,000 scalars)."""
    if type(value) is not dict and type(value) is not list:
        return _bad_scalar(value)
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if level > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, level + 1))
            elif (kind is int or kind is float) and (problem := _bad_scalar(child)):
                return problem
    return None


def _bad_scalar(value: Any) -> str | None:
    kind = type(value)
    if kind is int and abs(value) > MAX_INT:
        return "an integer exceeds 64 bits"
    if kind is float and not math.isfinite(value):
        return "a number is not finite"
    return None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "..."
