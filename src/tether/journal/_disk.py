"""The blocking half of a transcript: load and repair, append durably, the lock file.

Every function here blocks on the disk; ``_transcript.py`` runs them in a worker thread. Every
``OSError`` leaves as a ``JournalError`` naming the file, and nothing opened is left open.

The file holds its data and nothing else at every instant: each append grows it, so it is plain
JSON lines to any reader while it is written, and `tail -f` follows it (ADR 0035). A zero tail
left by a writer of before (which reserved space ahead: ADR 0027) is cut off, durably, when the
file is opened for writing.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import os
import re
from collections.abc import Sequence

import attrs

from .._util import write_all
from ._entries import Entry, encode
from ._scan import Damage, scan


class JournalError(OSError):
    """The transcript's file could not be read or written; ``filename`` and ``errno`` say
    which and why. After a failed append the entry is not durable: do not run the tool."""


@attrs.frozen
class Repair:
    """What opening a transcript had to repair."""

    kept_entries: int
    """Valid entries kept, in order (those after a damaged line included)."""
    quarantined_bytes: int
    """Bytes that were not valid entries, moved byte for byte to ``quarantine``."""
    quarantine: str
    """The file that holds them, concatenated in file order: ``<path>.corrupt-<ts>``."""
    reason: str
    """What is wrong with the first damaged span (a torn last line, a bad line...)."""
    damage: tuple[Damage, ...] = ()
    """Every damaged span, with its offset and length in the file as it was found."""
    lost_results: frozenset[str] = frozenset()
    """Call ids named as ``call_id`` in the damaged bytes: results whose lines were damaged."""


datasync = getattr(os, "fdatasync", os.fsync)
"""``fdatasync`` where the platform has it (the file's length is synced with its data)."""


@attrs.frozen
class Loaded:
    entries: list[Entry]
    size: int
    """Where the data ends."""
    repair: Repair | None
    allocated: int
    """The file's length: ``size`` plus a zero tail an earlier writer reserved (ADR 0027)."""


@attrs.define
class Tail:
    """Where a writer's data ends and how far the file reaches beyond it (only while a zero
    tail of an earlier writer is being cut off)."""

    size: int
    allocated: int


def load(path: str, *, create: bool) -> Loaded:
    """Read ``path``, keep its valid entries and quarantine the rest (durably).

    Damage at the end only (the usual torn write) is cut off in place; damage in the middle
    rewrites the file without it (a new file, fsynced, renamed over the old one). The
    quarantine file is written and fsynced first, so a crash at any point loses nothing: the
    next open finds the same damage again.

    Raises:
        JournalError: the file cannot be read, created or repaired (ENOSPC, EIO...); a repair
            that failed leaves no quarantine file behind.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as exc:
        if not create:
            raise JournalError(errno.ENOENT, "no such transcript", path) from exc
        _create(path)
        return Loaded([], 0, None, 0)
    except OSError as exc:
        raise error(exc, path) from exc
    found = scan(data)
    if found.intact:
        return Loaded(found.entries, found.size, None, len(data))
    quarantine = f"{path}.corrupt-{_stamp()}"
    kept = found.kept(data)
    try:
        _write_new(quarantine, found.quarantined(data))
        if found.tail_only:
            with open(path, "r+b") as f:
                f.truncate(len(kept))
                os.fsync(f.fileno())
        else:
            _replace(path, kept)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(quarantine)  # the transcript is as it was: the next open tries again
        raise error(exc, path) from exc
    lost = frozenset(m.decode() for m in _CALL_ID.findall(found.quarantined(data)))
    repair = Repair(
        len(found.entries), found.damaged_bytes, quarantine, found.reason, found.damage, lost
    )
    return Loaded(found.entries, len(kept), repair, len(kept))


_CALL_ID = re.compile(rb'"call_id":"(call_[0-9a-f]{16})"')
"""A result's ``call_id`` as tether writes it, found in damaged bytes."""


def _replace(path: str, data: bytes) -> None:
    """Make ``data`` the content of ``path`` atomically: a new file, fsynced, renamed."""
    temporary = f"{path}.repairing"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # left by a repair that crashed
    try:
        _write_new(temporary, data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_dir(path)


def append(fd: int, data: bytes, tail: Tail, path: str) -> None:
    """Write ``data`` where the data ends and make it durable; ``tail`` moves past it.

    On failure the file is cut back to ``tail.size`` (best effort), so no torn line is left.

    Raises:
        JournalError: the write or the sync failed; nothing of ``data`` is durable.
    """
    end = tail.size + len(data)
    try:
        write_all(fd, data, tail.size)
        datasync(fd)  # it also writes the file's length, if this append grew it
    except OSError as exc:
        cut_back(fd, tail)
        raise error(exc, path) from exc
    tail.size = end
    tail.allocated = max(tail.allocated, end)


def cut_back(fd: int, tail: Tail) -> None:
    """Cut the file back to where the data ends (best effort: if this fails too, the next
    open finds a torn line and repairs it)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, tail.size)
        tail.allocated = tail.size


def trim(fd: int, tail: Tail) -> None:
    """Cut a zero tail off, durably, so the file is plain JSON lines; best effort (a tail left
    behind reads as the end of the data to tether, and is cut again at the next open)."""
    if tail.allocated > tail.size:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, tail.size)
            os.fsync(fd)
            tail.allocated = tail.size


def open_for_append(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)  # read too: a relocation copies it
    except OSError as exc:
        raise error(exc, path) from exc


LOCK_TRIES = 8
"""Times ``lock`` opens the lock file anew when its holder removed it meanwhile."""


def lock(path: str) -> int:
    """Take ``<path>.lock`` for this process; the lock file's descriptor.

    The lock is an ``flock``, so it dies with its holder; the file holds the holder's pid,
    and ``unlock`` removes it. On any failure the descriptor is closed, so the lock is never
    left held.

    Raises:
        JournalError: another process (or another ``Transcript`` here) holds it, naming the
            pid; or the lock file cannot be created or written (ENOSPC, EROFS...).
    """
    lock_path = f"{path}.lock"
    for _ in range(LOCK_TRIES):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise error(exc, lock_path) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise JournalError(
                errno.EBUSY, f"transcript is being written by pid {holder}", path
            ) from None
        except OSError as exc:
            os.close(fd)
            raise error(exc, lock_path) from exc
        if _names(lock_path, fd):
            break
        os.close(fd)  # its holder removed it as it let go, after we opened it: open anew
    else:
        raise JournalError(errno.EBUSY, "its lock file keeps being replaced", path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise error(exc, lock_path) from exc
    return fd


def unlock(path: str, fd: int) -> None:
    """Let go of ``<path>.lock``: the file is removed while still held (so no lock file is
    left behind), then closed. One who opened it before and locks it after sees that the path
    no longer names it, and opens the path anew (``lock``)."""
    lock_path = f"{path}.lock"
    try:
        if _names(lock_path, fd):
            os.unlink(lock_path)
    except OSError:
        pass  # a lock file that cannot be removed is only left behind, as before
    finally:
        os.close(fd)


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open on ``fd``."""
    try:
        named, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def _create(path: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise error(exc, path) from exc
    os.close(fd)
    try:
        _fsync_dir(path)
    except OSError as exc:
        raise error(exc, path) from exc


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def error(exc: OSError, path: str) -> JournalError:
    code = exc.errno or errno.EIO
    return JournalError(code, os.strerror(code), path)


def encode_all(entries: Sequence[Entry]) -> bytes:
    """The lines of ``entries``, concatenated."""
    if len(entries) == 1:
        return encode(entries[0])
    return b"".join(encode(entry) for entry in entries)
