"""``scan``: which lines of a transcript are valid entries, and which are damage.

A line is kept if it is a valid entry whose ``seq`` is greater than every kept line's before
it; any other line is damage, and so is a last line without its newline (a torn write). A bad
line in the middle is damage on its own: the valid entries after it are kept, in order, so one
flipped byte never costs an acknowledged entry or the result of a finished tool call.

A run of zero bytes at the very end is space a writer of an earlier version reserved ahead
(ADR 0027; none is written since ADR 0035), not damage: the data ends at the last byte that
is not zero. No valid line holds a zero byte
(JSON escapes it), so a zero anywhere else is damage like any other bad byte.
"""

from __future__ import annotations

import gc
import json

import attrs

from ._entries import Entry, EntryError, decode, from_record


@attrs.frozen
class Damage:
    """One span of a transcript that is not a valid entry."""

    offset: int
    """Where it starts, in bytes from the start of the file."""
    length: int
    """How many bytes it covers (with its newline, if it has one)."""
    reason: str
    """What is wrong with it."""


@attrs.frozen
class Scan:
    """The valid entries of a transcript, and every damaged span, in file order."""

    entries: list[Entry]
    """The entries that read, in order."""
    damage: tuple[Damage, ...]
    """Each damaged line: where it is, how long, and why it does not read."""
    size: int
    """Where the data ends: the length of the bytes scanned, less a reserved zero tail."""

    @property
    def intact(self) -> bool:
        """Whether every byte belongs to a valid entry."""
        return not self.damage

    @property
    def damaged_bytes(self) -> int:
        """How many bytes the damaged spans hold in all."""
        return sum(d.length for d in self.damage)

    @property
    def reason(self) -> str:
        """The first damage's reason, with how many more spans there are; ``""`` if intact."""
        if not self.damage:
            return ""
        more = len(self.damage) - 1
        return self.damage[0].reason + (f" (and {more} more damaged lines)" if more else "")

    @property
    def tail_only(self) -> bool:
        """Whether all damage sits at the end, so cutting the file back repairs it."""
        end = self.size
        for damage in reversed(self.damage):
            if damage.offset + damage.length != end:
                return False
            end = damage.offset
        return True

    def kept(self, data: bytes) -> bytes:
        """``data`` with every damaged span cut out: the valid lines, byte for byte."""
        parts: list[bytes] = []
        pos = 0
        for damage in self.damage:
            parts.append(data[pos : damage.offset])
            pos = damage.offset + damage.length
        parts.append(data[pos : self.size])
        return b"".join(parts)

    def quarantined(self, data: bytes) -> bytes:
        """The damaged spans of ``data``, byte for byte, in order."""
        return b"".join(data[d.offset : d.offset + d.length] for d in self.damage)


def scan(data: bytes) -> Scan:
    """Sort the lines of ``data`` into valid entries and damage; never raises.

    The common case, an intact file, is parsed with one ``json.loads`` over all complete
    lines; any doubt falls back to the line-by-line scan, which names each bad line.
    """
    size = _data_end(data)
    end = data.rfind(b"\n", 0, size) + 1
    collecting = gc.isenabled()
    gc.disable()  # building 100k objects would trigger full collections over all of them
    try:
        entries = _scan_whole(data[:end])
    finally:
        if collecting:
            gc.enable()
    if entries is None:
        return _scan_lines(data, size)
    damage: tuple[Damage, ...] = ()
    if end < size:
        damage = (Damage(end, size - end, f"a torn last line of {size - end} bytes"),)
    return Scan(entries, damage, size)


def _data_end(data: bytes) -> int:
    """The length of ``data`` without its zero tail, found without copying ``data``."""
    end = len(data)
    step = 4096
    while end and data[end - 1] == 0:
        start = max(0, end - step)
        block = data[start:end]
        trimmed = len(block.rstrip(b"\0"))
        end = start + trimmed
        if trimmed:
            break
        step = min(step * 2, 1 << 22)
    return end


def _scan_whole(body: bytes) -> list[Entry] | None:
    if not body:
        return []
    try:
        records = json.loads(b"[" + body[:-1].replace(b"\n", b",") + b"]")
        if len(records) != body.count(b"\n"):
            return None
        entries = [from_record(record) for record in records]
    except (ValueError, UnicodeDecodeError, RecursionError):  # EntryError is a ValueError
        return None
    seq = 0
    for entry in entries:
        if entry.seq <= seq:
            return None
        seq = entry.seq
    return entries


def _scan_lines(data: bytes, size: int) -> Scan:
    entries: list[Entry] = []
    damage: list[Damage] = []
    pos = 0
    seq = 0
    line = 0
    while pos < size:
        line += 1
        newline = data.find(b"\n", pos, size)
        if newline < 0:
            torn = size - pos
            damage.append(Damage(pos, torn, f"a torn last line of {torn} bytes"))
            break
        try:
            entry = decode(data[pos:newline])
        except EntryError as exc:
            damage.append(Damage(pos, newline + 1 - pos, f"line {line}: {exc}"))
        else:
            if entry.seq <= seq:
                reason = f"line {line}: seq {entry.seq} after {seq}"
                damage.append(Damage(pos, newline + 1 - pos, reason))
            else:
                seq = entry.seq
                entries.append(entry)
        pos = newline + 1
    return Scan(entries, tuple(damage), size)
