"""The blocking half of a transcript: load and repair, append durably, the lock file.

Every function here blocks on the disk; ``_transcript.py`` runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import gc
import json
import os
from collections.abc import Sequence

import attrs

from ._entries import Entry, EntryError, decode, encode, from_record


class JournalError(OSError):
    """The transcript's file could not be read or written; ``filename`` and ``errno`` say
    which and why. After a failed append the entry is not durable: do not run the tool."""


@attrs.frozen
class Repair:
    """What opening a transcript had to repair."""

    kept_entries: int
    """Entries in the valid prefix, kept in place."""
    quarantined_bytes: int
    """Bytes after the valid prefix, moved byte for byte to ``quarantine``."""
    quarantine: str
    """The file that holds them: ``<path>.corrupt-<ts>``."""
    reason: str
    """Why the prefix ends there: a torn last line, or what is wrong with the first bad line."""


@attrs.frozen
class Loaded:
    entries: list[Entry]
    size: int
    repair: Repair | None


def load(path: str, *, create: bool) -> Loaded:
    """Read ``path``, keep its valid prefix and quarantine the rest (durably).

    Raises:
        JournalError: the file cannot be read, created or repaired.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as exc:
        if not create:
            raise JournalError(errno.ENOENT, "no such transcript", path) from exc
        _create(path)
        return Loaded([], 0, None)
    except OSError as exc:
        raise _error(exc, path) from exc
    entries, end, reason = scan(data)
    if end == len(data):
        return Loaded(entries, end, None)
    quarantine = f"{path}.corrupt-{_stamp()}"
    try:
        _write_new(quarantine, data[end:])
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    except OSError as exc:
        raise _error(exc, path) from exc
    return Loaded(entries, end, Repair(len(entries), len(data) - end, quarantine, reason))


def scan(data: bytes) -> tuple[list[Entry], int, str]:
    """The valid prefix of ``data``: its entries, its length, and why it ends (if it does).

    The common case, an intact file, is parsed with one ``json.loads`` over all complete
    lines; any doubt falls back to the line-by-line scan, which finds and names the first bad
    line.
    """
    end = data.rfind(b"\n") + 1
    collecting = gc.isenabled()
    gc.disable()  # building 100k objects would trigger full collections over all of them
    try:
        entries = _scan_whole(data[:end])
    finally:
        if collecting:
            gc.enable()
    if entries is None:
        return _scan_lines(data)
    if end < len(data):
        return entries, end, f"a torn last line of {len(data) - end} bytes"
    return entries, end, ""


def _scan_whole(body: bytes) -> list[Entry] | None:
    if not body:
        return []
    try:
        records = json.loads(b"[" + body[:-1].replace(b"\n", b",") + b"]")
        if len(records) != body.count(b"\n"):
            return None
        entries = [from_record(record) for record in records]
    except (ValueError, UnicodeDecodeError):  # EntryError is a ValueError
        return None
    seq = 0
    for entry in entries:
        if entry.seq <= seq:
            return None
        seq = entry.seq
    return entries


def _scan_lines(data: bytes) -> tuple[list[Entry], int, str]:
    entries: list[Entry] = []
    pos = 0
    seq = 0
    while pos < len(data):
        newline = data.find(b"\n", pos)
        if newline < 0:
            return entries, pos, f"a torn last line of {len(data) - pos} bytes"
        try:
            entry = decode(data[pos:newline])
        except EntryError as exc:
            return entries, pos, f"line {len(entries) + 1}: {exc}"
        if entry.seq <= seq:
            return entries, pos, f"line {len(entries) + 1}: seq {entry.seq} after {seq}"
        seq = entry.seq
        entries.append(entry)
        pos = newline + 1
    return entries, pos, ""


def append(fd: int, data: bytes, size: int, path: str) -> int:
    """Write ``data`` at the end and fsync; the new size.

    On failure the file is cut back to ``size`` (best effort), so no torn line is left behind.

    Raises:
        JournalError: the write or the fsync failed; nothing of ``data`` is durable.
    """
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):  # if this fails too, the next open repairs it
            os.ftruncate(fd, size)
        raise _error(exc, path) from exc
    return size + len(data)


def open_for_append(path: str) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError as exc:
        raise _error(exc, path) from exc


def lock(path: str) -> int:
    """Take ``<path>.lock`` for this process; the lock file's descriptor.

    The lock is an ``flock``, so it dies with its holder; the file holds the holder's pid.

    Raises:
        JournalError: another process (or another ``Transcript`` here) holds it; it names the pid.
    """
    lock_path = f"{path}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise _error(exc, lock_path) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise JournalError(
            errno.EBUSY, f"transcript is being written by pid {holder}", path
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _create(path: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise _error(exc, path) from exc
    os.close(fd)
    _fsync_dir(path)


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _error(exc: OSError, path: str) -> JournalError:
    code = exc.errno or errno.EIO
    return JournalError(code, os.strerror(code), path)


def encode_all(entries: Sequence[Entry]) -> bytes:
    """The lines of ``entries``, concatenated."""
    return b"".join(encode(entry) for entry in entries)
