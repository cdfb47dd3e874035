"""``KernelSync``: ``fdatasync`` run by the kernel (Linux native AIO), awaited on an eventfd.

A worker thread costs a durable append two wake-ups across CPUs, about 50 µs on the 2-core VM
here: as much as half the sync itself. ``io_submit`` of an ``IOCB_CMD_FDSYNC`` (Linux 4.18+)
hands the sync to a kernel worker on the same CPU, which signals the file's eventfd when it is
done; the trio run waits on that like on any socket (ADR 0027). This is the libaio ABI, spoken
through ``ctypes`` on the two little-endian 64-bit ABIs whose syscall numbers are listed here.
Anywhere else, or when ``io_setup`` or a file's first probe fails (an old kernel, a seccomp
filter, ``fs.aio-max-nr`` exhausted), ``open`` returns ``None`` and the caller syncs on a
thread; so does an append that finds the ring full. ``TETHER_AIO=0`` turns it off
(``wanted()``). The transcript syncs its file with it, the SQLite epoch store its WAL.

One AIO context serves the whole process, made on first use and never destroyed
(``io_destroy`` waits for an RCU grace period, about 30 ms); a forked child makes its own.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import platform
import sys
import threading
from typing import Any

import trio

from . import _backend

# io_setup, io_destroy, io_getevents, io_submit
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_FDSYNC = 3
_RESFD = 1 << 0
RING = 1024
"""Syncs in flight at once, across the process (one per open file at most)."""


def wanted() -> bool:
    """Whether the kernel's AIO may be used (``TETHER_AIO=0`` says no)."""
    return os.environ.get("TETHER_AIO", "1") != "0"


class _Iocb(ctypes.Structure):
    _fields_ = (  # the little-endian layout of struct iocb
        ("data", ctypes.c_uint64),
        ("key", ctypes.c_uint32),
        ("rw_flags", ctypes.c_int32),
        ("opcode", ctypes.c_uint16),
        ("reqprio", ctypes.c_int16),
        ("fildes", ctypes.c_uint32),
        ("buf", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("offset", ctypes.c_int64),
        ("reserved2", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("resfd", ctypes.c_uint32),
    )


class _Event(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    )


class _Ring:
    """The process's AIO context, and the answers reaped from it that their owner has not
    taken yet (a reap takes every answer ready, whoever's it is)."""

    def __init__(self) -> None:
        numbers = _SYSCALLS.get(platform.machine())
        if sys.platform != "linux" or numbers is None or sys.byteorder != "little":
            raise OSError(errno.ENOSYS, "no Linux AIO ABI known here")
        call = ctypes.CDLL(None, use_errno=True).syscall
        call.restype = ctypes.c_long
        self._call: Any = call
        setup, _, self._getevents, self._submit = numbers
        self._context = ctypes.c_ulong(0)
        if call(setup, RING, ctypes.byref(self._context)) != 0:
            code = ctypes.get_errno() or errno.EIO
            raise OSError(code, f"io_setup: {os.strerror(code)}")
        self._events = (_Event * RING)()
        self._now = (ctypes.c_long * 2)(0, 0)
        self._answers: dict[int, int] = {}
        self._lock = threading.Lock()
        self._keys = itertools.count(1)

    def key(self) -> int:
        return next(self._keys)

    def submit(self, iocb: Any) -> bool:
        """Submit one iocb; ``False`` if the ring is full (``EAGAIN``).

        Raises:
            OSError: the kernel refused it.
        """
        if self._call(self._submit, self._context, 1, iocb) == 1:
            return True
        code = ctypes.get_errno() or errno.EIO
        if code == errno.EAGAIN:
            return False
        raise OSError(code, f"io_submit: {os.strerror(code)}")

    def answer(self, key: int) -> int | None:
        """The result of the sync submitted with ``key`` (0 or ``-errno``), if it is done."""
        with self._lock:
            if key not in self._answers:
                got = self._call(self._getevents, self._context, 0, RING, self._events, self._now)
                if got == 1 and self._events[0].data == key:  # the usual case: only this one
                    return int(self._events[0].res)
                for event in self._events[: max(got, 0)]:
                    self._answers[event.data] = event.res
            return self._answers.pop(key, None)


_ring: _Ring | None = None
_ring_lock = threading.Lock()


def _the_ring() -> _Ring:
    global _ring
    with _ring_lock:
        if _ring is None:
            _ring = _Ring()
        return _ring


def _forget_ring() -> None:
    global _ring, _ring_lock
    _ring = None  # the parent's context is not the child's
    _ring_lock = threading.Lock()  # nor its lock, which another thread may have held


os.register_at_fork(after_in_child=_forget_ring)


class KernelSync:
    """One file's ``fdatasync``, submitted to the kernel and awaited without a thread."""

    def __init__(self, ring: _Ring, fd: int) -> None:
        self._ring = ring
        self._key = ring.key()
        self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._iocb = _Iocb(
            data=self._key, opcode=_FDSYNC, fildes=fd, flags=_RESFD, resfd=self._eventfd
        )
        self._list = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))

    @classmethod
    def open(cls, fd: int) -> KernelSync | None:
        """A ``KernelSync`` for ``fd``, or ``None`` where the kernel cannot do it (see the
        module). Blocks for one sync of ``fd`` (the probe)."""
        try:
            sync = cls(_the_ring(), fd)
        except OSError:
            return None
        try:
            probed = sync._ring.submit(sync._list)
            if probed:
                os.set_blocking(sync._eventfd, True)
                os.eventfd_read(sync._eventfd)
                os.set_blocking(sync._eventfd, False)
                sync._check()
        except OSError:
            probed = False
        if not probed:
            sync.close()
            return None
        return sync

    async def datasync(self) -> bool:
        """``fdatasync`` the file while the trio run goes on; ``False`` if it could not be
        submitted now (the ring is full: sync some other way). Not cancellable: a sync
        submitted is answered, and a cancellation waits for the next checkpoint.

        Raises:
            OSError: the sync failed (its errno), or the kernel refused it.
        """
        if not self._ring.submit(self._list):
            return False
        if not _backend.on_trio():
            await self._answered_asyncio()
            return True
        try:
            await trio.lowlevel.wait_readable(self._eventfd)
        except trio.Cancelled:  # delivered again at the caller's next checkpoint
            with trio.CancelScope(shield=True):
                await trio.lowlevel.wait_readable(self._eventfd)
        while True:
            try:
                os.eventfd_read(self._eventfd)
            except BlockingIOError:
                with trio.CancelScope(shield=True):
                    await trio.lowlevel.wait_readable(self._eventfd)
                continue
            break
        self._check()
        return True

    async def _answered_asyncio(self) -> None:
        """Under asyncio: wait for the submitted sync's answer, a cancellation meanwhile
        delivered at the caller's next await."""
        while True:
            await _backend.finish(lambda: _backend.wait_readable(self._eventfd))
            try:
                os.eventfd_read(self._eventfd)
            except BlockingIOError:
                continue
            break
        self._check()

    def _check(self) -> None:
        # The eventfd is signalled after the answer is in the ring, so a reap finds it.
        result = self._ring.answer(self._key)
        if result is None:
            raise OSError(errno.EIO, "the kernel signalled a sync it did not answer")
        if result < 0:
            raise OSError(-result, os.strerror(-result))

    def close(self) -> None:
        """Close the eventfd (no sync may be in flight); idempotent."""
        if self._eventfd >= 0:
            os.close(self._eventfd)
            self._eventfd = -1
