"""Pipes and sockets as streams on both loops (part of the backend seam, ADR 0053):
``PipeStream`` is what a child's ``stdin``, ``stdout`` and ``stderr`` are, trio's ``FdStream``
under trio, and ``FdStream`` here under asyncio, where anyio has no stream over a descriptor
(its process streams belong to ``anyio.open_process``, which waits for exits through asyncio's
``Process.wait()``); ``SocketStream`` is a connected Unix socket under asyncio, as
``trio.SocketStream`` is under trio (the harness's side of the wire)."""

from __future__ import annotations

import errno
import os
import socket
from typing import Protocol

import anyio
import anyio.lowlevel

from . import _backend


class PipeStream(Protocol):
    """One end of a child's pipe: ``trio.lowlevel.FdStream`` under trio, ``FdStream`` under
    asyncio; both close the descriptor they were given."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes: ...

    async def send_all(self, data: bytes | bytearray | memoryview) -> None: ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...

    def fileno(self) -> int: ...


def fd_stream(fd: int) -> PipeStream:
    """A stream over ``fd`` (made non-blocking), for the loop that runs now."""
    if _backend.on_trio():
        import trio

        return trio.lowlevel.FdStream(fd)
    return FdStream(fd)


READ_SIZE = 65536


class FdStream:
    """A pipe's end under asyncio, as ``trio.lowlevel.FdStream`` is under trio: it reads with
    ``receive_some`` (``b""`` at its end), writes with ``send_all``, and closes the descriptor
    it was given. ``receive`` and ``send`` are the same, named as anyio's byte streams."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._closed = False

    def fileno(self) -> int:
        """The descriptor (while open)."""
        return self._fd

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """At most ``max_bytes`` (64 KiB if not given) once some are there; ``b""`` at the
        end of the stream.

        Raises:
            anyio.ClosedResourceError: the stream was closed here.
        """
        size = READ_SIZE if max_bytes is None else max_bytes
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            try:
                data = os.read(self._fd, size)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``.

        Raises:
            anyio.BrokenResourceError: the reader closed its end.
            anyio.ClosedResourceError: the stream was closed here.
        """
        view = memoryview(data)
        await anyio.lowlevel.checkpoint_if_cancelled()
        while view:
            self._check_open()
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                raise anyio.BrokenResourceError from exc
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        """As ``receive_some``, but the end of the stream raises ``anyio.EndOfStream``."""
        data = await self.receive_some(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        """As ``send_all``."""
        await self.send_all(item)

    def close(self) -> None:
        """Close the descriptor; a task waiting on it gets ``anyio.ClosedResourceError``."""
        if self._closed:
            return
        self._closed = True
        _backend.notify_closing(self._fd)
        os.close(self._fd)

    async def aclose(self) -> None:
        """``close``, as a checkpoint."""
        self.close()
        await anyio.lowlevel.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            os.close(self._fd)


class SocketStream(FdStream):
    """A connected socket under asyncio: the parts of ``trio.SocketStream`` the wire uses
    (``socket``, whose ``fileno()`` is -1 once closed; ``send_all``, ``receive_some``,
    ``aclose``)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock.fileno())
        self.socket = sock

    def close(self) -> None:
        """Close the socket; a task waiting on it gets ``anyio.ClosedResourceError``."""
        if self._closed:
            return
        self._closed = True
        _backend.notify_closing(self._fd)
        self.socket.close()

    def __del__(self) -> None:
        pass  # the socket object closes itself when collected


async def connect_unix(path: str) -> SocketStream:
    """Connect to the Unix socket at ``path`` under asyncio.

    Raises:
        BlockingIOError: its listen queue is full (nothing was connected).
        OSError: nobody listens there.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.connect(path)  # a Unix socket connects at once, or not at all
    except BaseException:
        sock.close()
        raise
    await anyio.lowlevel.checkpoint()
    return SocketStream(sock)
