"""Linux kernel interfaces the process layer needs: ``/proc/PID/stat``, pidfds, the subreaper.

Each function says what it returns where the platform lacks the interface, so callers fall
back to psutil (identity) or polling (exit) instead of failing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import logging
import os
import signal
import struct
import sys

import attrs

logger = logging.getLogger("tether.process")

_PR_SET_CHILD_SUBREAPER = 36


@attrs.frozen
class Stat:
    """The fields of ``/proc/PID/stat`` tether reads."""

    state: str
    """One letter: ``R``, ``S``, ``D``, ``T``, ``Z`` (zombie)..."""
    ppid: int
    pgrp: int
    session: int
    start: int
    """Start time in clock ticks after boot: with the pid, the process's identity."""
    exit_code: int | None = None
    """A zombie's wait status, as ``waitpid`` would give it (``None`` where unreadable)."""


_SHORT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def read_stat(pid: int, *, strict: bool = False) -> Stat | None:
    """``/proc/PID/stat`` of ``pid``, or ``None`` if it does not exist (or not on Linux).

    Raises:
        OSError: with ``strict``, the file could not be read for want of descriptors or
            memory: the process may well exist (without ``strict`` that is ``None`` too).
    """
    fields = _stat_fields(pid, strict=strict)
    if fields is None:
        return None
    return Stat(
        state=fields[0].decode(),
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        start=int(fields[19]),
        exit_code=int(fields[49]) if len(fields) > 49 else None,
    )


_PF_KTHREAD = 0x00200000


def user_process(pid: int) -> bool:
    """Whether ``pid`` is a live process running a program (not a zombie, not a kernel
    thread): one whose environment can be read."""
    stat = _stat_fields(pid)
    return stat is not None and stat[0] != b"Z" and not int(stat[6]) & _PF_KTHREAD


def has_arguments(pid: int) -> bool:
    """Whether ``/proc/PID/cmdline`` reads anything: inside ``execve``, the new image's
    arguments are laid out just before its environment."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return bool(f.read(1))
    except OSError:
        return False


def _stat_fields(pid: int, *, strict: bool = False) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError as exc:
        if strict and exc.errno in _SHORT_OF:
            raise
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    return raw[raw.rindex(b")") + 2 :].split()


def pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid``; ``None`` where the kernel or Python has none.

    Raises:
        ProcessLookupError: no process has that pid.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError as exc:
        if isinstance(exc, ProcessLookupError):
            raise
        return None  # ENOSYS and friends: an old kernel


_PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
"""``_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)`` with the first 64 bytes of the struct,
which end with ``exit_code`` (``PIDFD_INFO_SIZE_VER0``)."""
_PIDFD_INFO_EXIT = 1 << 3
_INFO = struct.Struct("=Q52xi")
"""``mask`` at offset 0 and ``exit_code`` at offset 60."""


def pidfd_exit_status(pidfd: int) -> int | None:
    """The wait status of the process ``pidfd`` refers to, once it has exited and someone,
    anyone, has reaped it (Linux 6.15 and later: ``PIDFD_INFO_EXIT``); ``None`` while it has
    not, or where the kernel cannot tell."""
    buffer = bytearray(_INFO.size)
    _INFO.pack_into(buffer, 0, _PIDFD_INFO_EXIT, 0)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, buffer)
    except OSError:  # ENOTTY or EINVAL before 6.15, ESRCH once reaped without a record
        return None
    mask, status = _INFO.unpack(buffer)
    return status if mask & _PIDFD_INFO_EXIT else None


def pidfd_send_signal(pidfd: int, sig: int) -> None:
    """Signal the process a pidfd refers to; it cannot be a newer process with the same pid."""
    signal.pidfd_send_signal(pidfd, sig)


@functools.cache
def become_subreaper() -> bool:
    """Make this process a child subreaper (once); whether the platform allowed it.

    Orphaned descendants (double forks, ``setsid``, ``nohup``) are then reparented here instead
    of to init, so they can be found and reaped. Never ``PR_SET_PDEATHSIG``: it fires when the
    parent *thread* exits, and trio's worker threads exit after 10 s idle.
    """
    if sys.platform != "linux":
        logger.warning("no child subreaper on %s: escaped descendants go to init", sys.platform)
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        logger.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: %s", os.strerror(errno))
        return False
    logger.debug("pid %d is a child subreaper", os.getpid())
    return True


@functools.cache
def boot_id() -> str | None:
    """The kernel's boot id: a pid recorded under another boot id names nothing now."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def exists(pid: int) -> bool:
    """Whether some process has ``pid`` (zombie or not), asked without a descriptor."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
