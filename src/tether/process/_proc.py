"""Linux kernel interfaces the process layer needs: ``/proc/PID/stat``, pidfds, the subreaper.

Each function says what it returns where the platform lacks the interface, so callers fall
back to psutil (identity) or polling (exit) instead of failing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import signal
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


def read_stat(pid: int) -> Stat | None:
    """``/proc/PID/stat`` of ``pid``, or ``None`` if it does not exist (or not on Linux)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return Stat(
        state=fields[0].decode(),
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        start=int(fields[19]),
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


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
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
