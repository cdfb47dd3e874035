"""Linux: read signals with their sender from a signalfd.

The signals are blocked in the calling thread (and so in every thread it starts afterwards), so
the kernel leaves them pending and the signalfd hands each one over with its ``siginfo``: the
sender's pid and uid. This is why tether does not use trio's ``open_signal_receiver`` alone: a
Python-level handler never sees ``siginfo``. A thread that existed before and does not block the
signals can still take one; ``_receive.py`` covers that case with a handler that reports the
sender as unknown.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import struct
from collections.abc import Iterable, Iterator

_SFD_CLOEXEC = os.O_CLOEXEC
_SFD_NONBLOCK = os.O_NONBLOCK
_SIGINFO_SIZE = 128  # sizeof(struct signalfd_siginfo)
_HEAD = struct.Struct("=IiiII")  # ssi_signo, ssi_errno, ssi_code, ssi_pid, ssi_uid


class _SigSet(ctypes.Structure):
    _fields_ = (("val", ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))),)


def available() -> bool:
    """Whether this platform has ``signalfd``."""
    libc = _libc()
    return libc is not None and hasattr(libc, "signalfd")


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


def open_signalfd(signals: Iterable[int]) -> int:
    """A non-blocking, close-on-exec signalfd for ``signals`` (which the caller blocks)."""
    libc = _libc()
    if libc is None:
        raise OSError("libc not found")
    mask = _SigSet()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    for signo in signals:
        mask.val[(signo - 1) // bits] |= 1 << ((signo - 1) % bits)
    fd = int(libc.signalfd(-1, ctypes.byref(mask), _SFD_CLOEXEC | _SFD_NONBLOCK))
    if fd < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"signalfd: {os.strerror(errno)}")
    return fd


def read_siginfo(fd: int) -> Iterator[tuple[int, int, int]]:
    """Every pending ``(signo, sender_pid, sender_uid)`` on ``fd``; stops when none is left."""
    while True:
        try:
            data = os.read(fd, _SIGINFO_SIZE * 16)
        except BlockingIOError:
            return
        for offset in range(0, len(data) - _SIGINFO_SIZE + 1, _SIGINFO_SIZE):
            signo, _errno, _code, pid, uid = _HEAD.unpack_from(data, offset)
            yield signo, pid, uid


def block(signals: Iterable[int]) -> set[int]:
    """Block ``signals`` in this thread; the previous mask, to restore with ``restore``."""
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, signals)}


def restore(previous: Iterable[int]) -> None:
    """Put back a mask returned by ``block``; pending signals are delivered at once."""
    signal.pthread_sigmask(signal.SIG_SETMASK, previous)
