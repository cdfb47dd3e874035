"""``salvage``: before a stale turn is interrupted, keep what it produced.

Incident 003: a stalled worker had already written a review with seven findings to a file; the
turn was interrupted and the verdict never reached anyone. Salvage copies the turn's latest text
and its named artifact files, each within an explicit size limit, and says when it cut one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import attrs

TEXT_LIMIT = 16_384
FILE_LIMIT = 65_536


@attrs.frozen
class SalvagedFile:
    """One artifact: its excerpt (the first ``limit`` bytes, decoded), or why there is none."""

    path: str
    """The file's path."""
    size: int | None
    """Its size in bytes (``None``: it could not be read)."""
    excerpt: str
    """Its first bytes as text, within the limit."""
    truncated: bool
    """Whether ``excerpt`` was cut to the limit."""
    error: str | None = None
    """Why it could not be read, if it could not."""


@attrs.frozen
class Salvage:
    """What a turn had produced when it was found stale."""

    route: str
    """The route the turn ran on."""
    reason: str
    """Why the turn is being salvaged."""
    text: str
    """The turn's latest text, within the limit."""
    text_truncated: bool
    """Whether ``text`` was cut to the limit."""
    files: tuple[SalvagedFile, ...]
    """The named artifact files, each within its limit."""

    def describe(self) -> str:
        """The salvage as report text: the reason, the text and each file's excerpt, with
        every cut said."""
        cut = f", its last {len(self.text)} characters kept" if self.text_truncated else ""
        lines = [f"salvaged from route {self.route} ({self.reason}){cut}:", _indent(self.text)]
        for f in self.files:
            if f.error is not None:
                lines.append(f"file {f.path}: unavailable ({f.error})")
                continue
            note = f", first {len(f.excerpt)} characters kept" if f.truncated else ""
            lines += [f"file {f.path}: {f.size} bytes{note}:", _indent(f.excerpt)]
        return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


class TurnOutput(Protocol):
    """What a turn has produced so far: its route, its latest text, its named files."""

    @property
    def route(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def artifacts(self) -> Sequence[str]: ...


def salvage(
    turn: TurnOutput,
    reason: str,
    *,
    text_limit: int = TEXT_LIMIT,
    file_limit: int = FILE_LIMIT,
) -> Salvage:
    """Copy the turn's latest text (its last ``text_limit`` characters) and the first
    ``file_limit`` bytes of each artifact; a missing or unreadable file is named, not fatal."""
    text = turn.text
    truncated = len(text) > text_limit
    kept = text[-text_limit:] if truncated else text
    files = tuple(_salvage_file(path, file_limit) for path in turn.artifacts)
    return Salvage(turn.route, reason, kept, truncated, files)


def _salvage_file(path: str, limit: int) -> SalvagedFile:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(limit)
    except OSError as exc:
        return SalvagedFile(path, None, "", False, f"{type(exc).__name__}: {exc.strerror}")
    return SalvagedFile(path, size, data.decode(errors="replace"), size > limit)
