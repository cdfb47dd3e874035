"""Private places on a shared host: directories only their owner can change, and files only
their owner can read (queued prompts, transcripts and the event log hold what users typed).

Every check happens before anything is opened or created in the directory (ADR 0044): a
directory another user made first, or one others can write to, could hold a symlink that
turns the daemon's first write into a write to a file of the victim's choosing.
"""

from __future__ import annotations

import os
import stat


class UnsafeDirectory(PermissionError):
    """A directory tether would keep state in is not safe: not a directory, owned by another
    user, or open to others (the message names which)."""


def check_owned(directory: str, what: str, *, private: bool) -> None:
    """Refuse ``directory`` unless it is a directory of this uid that no other user can write
    to (``private``: that no other user can enter at all, mode 0700).

    Raises:
        UnsafeDirectory: naming ``what`` it is for, the directory and what is wrong with it.
    """
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        raise UnsafeDirectory(f"{what} {directory} does not exist") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{what} {directory} is not a directory")
    if info.st_uid != os.getuid():
        owner = f"uid {info.st_uid}, not {os.getuid()}"
        raise UnsafeDirectory(f"{what} {directory} is owned by {owner}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (0o077 if private else 0o022):
        need = "0700, so no other user can reach it" if private else "writable by its owner only"
        raise UnsafeDirectory(f"{what} {directory} has mode {mode:04o}; it must be {need}")


def make_owned(directory: str, what: str, *, private: bool = False) -> None:
    """Create ``directory`` (and its parents) with mode 0700 where missing, then check it.

    Raises:
        UnsafeDirectory: it exists but is not this uid's own (see ``check_owned``).
        OSError: it cannot be created.
    """
    os.makedirs(directory, mode=0o700, exist_ok=True)
    check_owned(directory, what, private=private)


def open_private(path: str | os.PathLike[str]) -> int:
    """A descriptor appending to ``path``, created with mode 0600 if missing."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def create_private(path: str) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (a store about to be opened by
    a library that would create it 0644; SQLite gives its ``-wal`` and ``-shm`` the mode of
    the database file)."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    os.close(fd)
