"""``Capture``: what a tool writes to one stream, kept up to a cap in bounded memory.

A tool may print hundreds of megabytes. Kept in a growing ``bytearray`` and copied into the
result's ``bytes``, a stream cost up to twice its cap at once (and both streams four times).
A capture keeps its first ``SPILL_AT`` bytes in memory; past that it spills to an unlinked
temporary file (in ``TMPDIR``, gone when closed or when this process dies) and reads the
whole back into the result in one allocation. So a stream peaks at its cap plus ``SPILL_AT``
in memory, and at most its cap on disk, only while the run collects it.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO

import anyio

SPILL_AT = 16 * 1024 * 1024
"""Bytes of a stream kept in memory before it spills to a temporary file."""
WRITE_EVERY = 1024 * 1024
"""Once spilled, bytes gathered in memory before each write to the file (in a thread)."""


class Capture:
    """One stream's output up to ``limit`` bytes; what comes past it is counted in
    ``dropped`` and not kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        """Bytes kept."""
        self.dropped = 0
        """Bytes read past ``limit``."""
        self._memory = bytearray()
        self._file: IO[bytes] | None = None

    async def add(self, data: bytes) -> None:
        """Keep what fits of ``data``; spill to the file when memory holds enough."""
        room = self.limit - self.size
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        if not data:
            return
        self.size += len(data)
        self._memory += data
        if self._file is None and len(self._memory) >= SPILL_AT:
            self._file = await anyio.to_thread.run_sync(tempfile.TemporaryFile)
        if self._file is not None and len(self._memory) >= WRITE_EVERY:
            await self._flush()

    async def value(self) -> bytes:
        """Everything kept, as one ``bytes`` (the file is closed once it was read back)."""
        if self._file is None:
            return bytes(self._memory)
        await self._flush()
        file = self._file
        data = await anyio.to_thread.run_sync(_read_all, file.fileno(), self.size)
        self.close()
        return data

    def close(self) -> None:
        """Drop the file, if it spilled (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._memory = bytearray()

    async def _flush(self) -> None:
        assert self._file is not None
        chunk, self._memory = self._memory, bytearray()
        await anyio.to_thread.run_sync(_write, self._file, chunk)


def _write(file: IO[bytes], chunk: bytearray) -> None:
    file.write(chunk)
    file.flush()


def _read_all(fd: int, size: int) -> bytes:
    """``size`` bytes from the start of ``fd``, read into one object (a regular file gives
    them in one ``pread``; the loop is for the kernel's 2 GiB cap per call)."""
    data = os.pread(fd, size, 0)
    if len(data) == size:
        return data
    parts = [data]
    done = len(data)
    while done < size:
        part = os.pread(fd, size - done, done)
        if not part:
            raise OSError(f"the spilled output lost {size - done} bytes")
        parts.append(part)
        done += len(part)
    return b"".join(parts)
