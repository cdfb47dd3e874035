"""``Sink``: where a transcript's bytes go, durably, and which path each append takes.

The fast path: an append is copied into the page cache on the trio thread (``pwrite`` at the
end of the data, growing the file; a few microseconds) and synced by the kernel
(``KernelSync``: an ``fdatasync``, which writes the new length too), so no thread is woken.
Everything else (an append over ``INLINE_WRITE``, a kernel without AIO, ``TETHER_AIO=0``) is
written and synced on the transcript's worker thread, and so is the sync of an append that
finds the AIO ring full.
Either way a failed append cuts the file back to where the data ended and raises
``JournalError``: nothing of it is durable.
"""

from __future__ import annotations

import os

from .. import _aio, _backend
from .._aio import KernelSync
from .._util import write_all
from .._worker import Worker
from . import _disk, _relocate
from ._disk import Tail

INLINE_WRITE = 64 * 1024
"""The largest append copied on the trio thread: a bigger one could keep the run waiting on
the page cache for longer than a thread hop costs."""


class Sink:
    """One transcript file open for appending, where its data ends, and its sync paths."""

    def __init__(
        self, fd: int, tail: Tail, worker: Worker, sync: KernelSync | None, path: str
    ) -> None:
        self.fd = fd
        self.tail = tail
        self.path = path
        self.held = _relocate.identity(fd)
        """The open file's device and inode, to compare the path with (ADR 0045)."""
        self._worker = worker
        self._sync = sync

    @classmethod
    async def open(cls, path: str, tail: Tail, worker: Worker) -> Sink:
        """Open ``path`` for appending after ``tail.size``, a zero tail of an earlier writer
        cut off first (``JournalError`` if it cannot be opened)."""
        fd = await worker.run(_disk.open_for_append, path)
        try:
            await worker.run(_disk.trim, fd, tail)
            sync = await worker.run(KernelSync.open, fd) if _aio.wanted() else None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, tail, worker, sync, path)

    @property
    def kernel_sync(self) -> bool:
        """Whether appends that fit are synced by the kernel's AIO."""
        return self._sync is not None

    async def append(self, data: bytes) -> None:
        """Make ``data`` durable after the data so far. Not cancellable once begun: it raises
        ``Cancelled`` only before anything is written; otherwise it finishes, and the
        cancellation waits for the next checkpoint (an append half done must be finished).

        Raises:
            JournalError: nothing of ``data`` is durable; the file is as it was.
        """
        tail = self.tail
        if self._sync is None or len(data) > INLINE_WRITE or tail.allocated > tail.size:
            await self._worker.run(_disk.append, self.fd, data, tail, self.path)
            return
        try:
            write_all(self.fd, data, tail.size)
            if not await self._sync.datasync():  # the process's AIO ring is full
                with _backend.cancel_scope(shield=True):
                    await self._worker.run(_disk.datasync, self.fd)
        except OSError as exc:
            with _backend.cancel_scope(shield=True):
                await self._worker.run(_disk.cut_back, self.fd, tail)
            raise _disk.error(exc, self.path) from exc
        tail.size += len(data)
        tail.allocated = tail.size

    async def move_to(self, fd: int) -> None:
        """Append to ``fd`` (a new file holding the same data) from now on; the old one is
        closed."""
        sync, self._sync = self._sync, None
        old, self.fd = self.fd, fd
        self.held = _relocate.identity(fd)
        await self._worker.run(_close, old, Tail(self.tail.size, self.tail.size), sync)
        if _aio.wanted():
            self._sync = await self._worker.run(KernelSync.open, fd)

    async def aclose(self) -> None:
        """Close the file (on the worker thread)."""
        sync, self._sync = self._sync, None
        await self._worker.run(_close, self.fd, self.tail, sync)


def _close(fd: int, tail: Tail, sync: KernelSync | None) -> None:
    try:
        if sync is not None:
            sync.close()
        _disk.trim(fd, tail)
    finally:
        os.close(fd)
