"""``Connection``: framed messages over one Unix stream socket, and who is at the other end."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from typing import Self, final

import attrs
import trio

from .._util import NoPublicConstructor
from ..channels import ChannelClosed
from ._codec import HEADER, ProtocolError, decode, encode, frame_length
from ._messages import Error, Message

logger = logging.getLogger("tether.wire")

_UCRED = struct.Struct("3i")
_READ = 65536


@attrs.frozen
class Peer:
    """The process at the other end of a Unix socket, as the kernel saw it at connect time."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: trio.socket.SocketType) -> Peer:
    """``SO_PEERCRED`` of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return Peer(*_UCRED.unpack(raw))


@final
class Connection(metaclass=NoPublicConstructor):
    """One connection: ``send`` and ``receive`` whole messages.

    Not safe for two tasks receiving at once (nor two sending); the harness's connection loop
    and the daemon's per-connection handler are each one task.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._drained = False
        """The last read left the socket empty: the next one waits first."""
        self.peer = peer_of(stream.socket)

    def __repr__(self) -> str:
        return f"<tether.wire.Connection peer pid={self.peer.pid} uid={self.peer.uid}>"

    async def send(self, message: Message) -> None:
        """Send one message.

        Raises:
            ChannelClosed: the peer is gone.
            ProtocolError: the message is too large to frame.
        """
        try:
            await self._stream.send_all(encode(message))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ChannelClosed(f"the peer (pid {self.peer.pid}) is gone: {exc}") from None

    def send_nowait(self, frame: bytes) -> bool:
        """Send one small encoded frame now if the socket takes all of it at once; whether
        it did (``False``: the socket is full, send it with ``send``). The caller makes sure
        no other send is part way through a frame. A frame under a page is never cut in two
        on a Unix stream socket: the kernel takes it whole or not at all.

        Raises:
            ChannelClosed: the peer is gone.
        """
        try:  # trio made the socket non-blocking; SIGPIPE is ignored, as Python starts
            sent = os.write(self._stream.socket.fileno(), frame)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise ChannelClosed(f"the peer (pid {self.peer.pid}) is gone: {exc}") from None
        if sent != len(frame):  # the kernel cut a small frame: nothing to do but give up
            raise ChannelClosed(f"a frame to pid {self.peer.pid} was cut ({sent} bytes sent)")
        return True

    async def receive(self) -> Message:
        """The next message. Safe to cancel: nothing is taken from the connection until a
        whole frame has arrived, so a cancelled ``receive`` loses nothing.

        Raises:
            ChannelClosed: the peer closed the connection between two frames.
            ProtocolError: a bad frame, or the connection was cut in the middle of one.
        """
        await self._buffered(HEADER.size)
        end = HEADER.size + frame_length(bytes(self._buffer[: HEADER.size]))
        await self._buffered(end)
        body = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        return decode(body)

    async def _buffered(self, size: int) -> None:
        """Read until the buffer holds ``size`` bytes."""
        buffer = self._buffer
        while len(buffer) < size:
            try:
                chunk = await self._receive_some()
            except (OSError, trio.ClosedResourceError) as exc:
                chunk = b""
                if not buffer:
                    raise ChannelClosed(f"the peer (pid {self.peer.pid}) is gone: {exc}") from None
            if not chunk:
                if not buffer:
                    raise ChannelClosed(f"the peer (pid {self.peer.pid}) closed the connection")
                raise ProtocolError(f"connection cut mid-frame ({len(buffer)} of {size} bytes)")
            buffer += chunk

    async def _receive_some(self) -> bytes:
        """What the socket holds (up to 64 KiB), waiting for it if it holds nothing; a
        schedule point, as ``receive_some`` is, but one task switch per wake-up rather than
        two (a daemon reads a thousand pongs a second this way).

        Raises:
            OSError: the connection broke (or was closed here: ``EBADF``).
            trio.ClosedResourceError: it was closed here while this waited.
        """
        fd = self._stream.socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the connection was closed")
        waited = False
        if self._drained:  # skip a read that would find nothing
            await trio.lowlevel.wait_readable(fd)
            waited = True
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                chunk = os.read(fd, _READ)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                waited = True
            else:
                break
        self._drained = 0 < len(chunk) < _READ
        if not waited:
            # It was ready at once: let the others run, without a cancellation that would
            # lose the bytes just read (it was checked before the read).
            await trio.lowlevel.cancel_shielded_checkpoint()
        return chunk

    async def refuse(self, error: ProtocolError) -> None:
        """Tell the peer why its frame was refused (best effort), then close."""
        with trio.move_on_after(1), contextlib.suppress(ChannelClosed, ProtocolError):
            await self.send(Error(error.reason))
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; idempotent."""
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except ChannelClosed:
            raise StopAsyncIteration from None
