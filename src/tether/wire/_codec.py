"""The one codec: a 4-byte big-endian length, then a JSON object whose ``type`` is the tag.

Decoding is strict about what the peer must send (a known ``type``, every field, each of its
JSON type; ``bool`` is not an integer) and lenient about what it may add (unknown fields are
ignored, so a newer peer can extend a message).
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import attrs

from ._messages import FIELD_TYPES, TAGS, Message, tag_of

MAX_FRAME = 1 << 20
"""The largest body accepted: 1 MiB."""
HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame; ``reason`` says what. Only the
    connection it came on is closed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(message: Message) -> bytes:
    """The frame for ``message``: header and body.

    Raises:
        ProtocolError: the body would exceed ``MAX_FRAME``.
    """
    record: dict[str, Any] = {"type": tag_of(type(message))}
    record.update(attrs.asdict(message, recurse=False))
    try:
        body = json.dumps(
            record, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except ValueError as exc:
        raise ProtocolError(f"{record['type']}: {exc}") from None
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a {record['type']} frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a header announces.

    Raises:
        ProtocolError: it exceeds ``MAX_FRAME``.
    """
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    return int(length)


def decode(body: bytes) -> Message:
    """The message in a frame's body.

    Raises:
        ProtocolError: invalid JSON, not an object, an unknown ``type``, a missing or wrongly
            typed field.
    """
    try:
        record = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}") from None
    if type(record) is not dict:
        raise ProtocolError("a frame must hold a JSON object")
    tag = record.get("type")
    cls = TAGS.get(tag) if type(tag) is str else None
    if cls is None:
        raise ProtocolError(f"unknown message type {tag!r}")
    values: dict[str, Any] = {}
    for name, expected in FIELD_TYPES[cls]:
        if name not in record:
            raise ProtocolError(f"{tag}: missing field {name!r}")
        value: Any = record[name]
        if expected is float and type(value) is int:
            value = float(value)
        if type(value) is not expected or (isinstance(value, float) and not math.isfinite(value)):
            raise ProtocolError(f"{tag}: field {name!r} must be a finite {expected.__name__}")
        values[name] = value
    message: Message = cls(**values)
    return message
