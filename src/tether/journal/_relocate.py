"""What a transcript does when its file is unlinked or replaced under it (ADR 0045).

A writer holds its file open, so after ``rm`` or ``mv`` its appends would land in an inode no
path names: acknowledged, and lost at the next open. So after every group commit the path is
compared with the open file (one ``lstat``). A path that is gone is recreated from the open
file's data, durably, before the appends are acknowledged; a path that now names something else
(another file, a directory, a link) is left alone: the open file's data is copied beside it and
the appends fail, so nothing is acknowledged that no reader can find.

``<path>.keep`` is a second name of the transcript's inode (a hard link), so a file deleted
while no writer holds it (the harness killed meanwhile) comes back at the next open.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import stat

from .._util import write_all
from ._disk import JournalError, Tail, _fsync_dir, _stamp, error

COPY_CHUNK = 1 << 20


class Place(enum.Enum):
    """What the transcript's path names, compared with the file a writer holds open."""

    SAME = "same"
    GONE = "gone"
    REPLACED = "replaced"


def identity(fd: int) -> tuple[int, int]:
    """The open file's device and inode."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def place(path: str, held: tuple[int, int]) -> Place:
    """Whether ``path`` still names the file ``held`` identifies (cheap: one ``lstat``)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Place.GONE
    except OSError:
        return Place.REPLACED
    if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) == held:
        return Place.SAME
    return Place.REPLACED


def keep_path(path: str) -> str:
    """The transcript's second name (``<path>.keep``)."""
    return f"{path}.keep"


def restore(path: str) -> None:
    """Before a transcript is opened: give a deleted ``path`` back its data from ``.keep``
    (best effort: with no ``.keep`` the file is created empty, as before)."""
    if os.path.lexists(path):
        return
    with contextlib.suppress(OSError):
        os.link(keep_path(path), path)
        _fsync_dir(path)


def point_keep(path: str, fd: int) -> None:
    """Make ``<path>.keep`` a name of the file ``fd`` holds (which ``path`` names now); best
    effort: a filesystem without hard links keeps only the check after each commit."""
    keep = keep_path(path)
    with contextlib.suppress(OSError):
        if place(keep, identity(fd)) is Place.SAME:
            return
        temporary = f"{keep}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        os.link(path, temporary)
        os.replace(temporary, keep)


def recreate(path: str, fd: int, tail: Tail) -> int:
    """``path`` is gone: a new file at ``path`` holding the open file's data, fsynced, and a
    descriptor of it for the appends to go on in.

    Raises:
        JournalError: it cannot be made (ESTALE if something took the path meanwhile).
    """
    temporary = f"{path}.restoring-{os.getpid()}"
    try:
        _copy(fd, tail.size, temporary)
        try:
            os.link(temporary, path)  # never over a file someone made meanwhile
        except FileExistsError:
            raise JournalError(errno.ESTALE, "the transcript file was replaced", path) from None
        _fsync_dir(path)
        new = os.open(path, os.O_RDWR | os.O_CLOEXEC)  # read too: it may be copied again
    except OSError as exc:
        if isinstance(exc, JournalError):
            raise
        raise error(exc, path) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    point_keep(path, new)
    return new


def save_orphan(path: str, fd: int, tail: Tail) -> str:
    """``path`` names another file now: copy the open file's data beside it, so nothing written
    is lost; the copy's path (``""`` if even that failed)."""
    orphan = f"{path}.orphaned-{_stamp()}"
    try:
        _copy(fd, tail.size, orphan)
    except OSError:
        return ""
    return orphan


def _copy(fd: int, size: int, to: str) -> None:
    out = os.open(to, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(COPY_CHUNK, size - offset), offset)
            if not chunk:
                break
            write_all(out, chunk, offset)
            offset += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    _fsync_dir(to)
