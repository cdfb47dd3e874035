"""``Connection``: framed messages over one Unix stream socket, and who is at the other end.

On a server's side a connection counts the bytes of its unfinished frame against the
server's ``FrameBudget`` and must finish each frame within ``FRAME_TIMEOUT``, so no peer
holds the server's memory for long (``_budget``), until the server admits the peer
(``leave_budget``); its buffer is let go after a large frame.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
from typing import Self, final

import anyio
import anyio.lowlevel
import attrs
import trio

from .. import _backend
from .._fdstream import SocketStream
from .._util import NoPublicConstructor
from ..channels import ChannelClosed
from ._budget import FRAME_TIMEOUT, FrameBudget
from ._codec import HEADER, ProtocolError, decode, encode, frame_length
from ._messages import Error, Message

logger = logging.getLogger("tether.wire")

_UCRED = struct.Struct("3i")
_READ = 65536
_GONE = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)
"""What a stream raises once its peer or its own end is gone, on either loop."""


@attrs.frozen
class Peer:
    """The process at the other end of a Unix socket, as the kernel saw it at connect time."""

    pid: int
    """The peer's pid."""
    uid: int
    """Its user id."""
    gid: int
    """Its group id."""


def peer_of(sock: trio.socket.SocketType | socket.socket) -> Peer:
    """``SO_PEERCRED`` of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return Peer(*_UCRED.unpack(raw))


@final
class Connection(metaclass=NoPublicConstructor):
    """One connection: ``send`` and ``receive`` whole messages.

    Not safe for two tasks receiving at once (nor two sending); the harness's connection loop
    and the daemon's per-connection handler are each one task. On trio the stream is a
    ``trio.SocketStream``, on asyncio the seam's ``SocketStream`` (a client's side only).
    """

    def __init__(
        self, stream: trio.SocketStream | SocketStream, budget: FrameBudget | None = None
    ) -> None:
        self._stream = stream
        on_trio = _backend.on_trio()
        lowlevel = trio.lowlevel if on_trio else anyio.lowlevel
        self._wait_readable = trio.lowlevel.wait_readable if on_trio else anyio.wait_readable
        self._checkpoint_if_cancelled = lowlevel.checkpoint_if_cancelled
        self._cancel_shielded_checkpoint = lowlevel.cancel_shielded_checkpoint
        self._buffer = bytearray()
        self._drained = False
        """The last read left the socket empty: the next one waits first."""
        self._budget = budget
        """The server's budget for unfinished frames (``None`` on a client's side)."""
        self._held = 0
        """Bytes of ``_buffer`` counted against the budget."""
        self._frame_deadline = math.inf
        """When the frame under way must be whole (a server's side only)."""
        self.peer = peer_of(stream.socket)
        """Who is at the other end, from the socket's credentials."""

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
        except _GONE as exc:
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
        if not self._buffer and end > _READ:
            self._buffer = bytearray()  # give a large frame's memory back
        self._frame_deadline = math.inf
        self._account()
        return decode(body)

    async def _buffered(self, size: int) -> None:
        """Read until the buffer holds ``size`` bytes."""
        while len(self._buffer) < size:
            if self._budget is None:
                await self._read_more(size, _READ)
                continue
            with trio.move_on_at(self._frame_deadline):
                wanted = min(size - len(self._buffer), _READ)
                granted = await self._budget.reserve(self._held, wanted)
                self._held += granted
                try:
                    await self._read_more(size, granted)
                finally:
                    self._account()  # what the read did not use goes back
                continue
            raise ProtocolError(
                f"a frame was not finished within {FRAME_TIMEOUT:g}s"
                f" ({len(self._buffer)} of {size} bytes)"
            )

    async def _read_more(self, size: int, limit: int) -> None:
        buffer = self._buffer
        try:
            chunk = await self._receive_some(limit)
        except (OSError, *_GONE) as exc:
            chunk = b""
            if not buffer:
                raise ChannelClosed(f"the peer (pid {self.peer.pid}) is gone: {exc}") from None
        if not chunk:
            if not buffer:
                raise ChannelClosed(f"the peer (pid {self.peer.pid}) closed the connection")
            raise ProtocolError(f"connection cut mid-frame ({len(buffer)} of {size} bytes)")
        buffer += chunk
        self._account()

    def _account(self) -> None:
        """Count the buffer against the server's budget; a frame that starts gets its
        deadline."""
        if self._budget is None:
            return
        if not self._buffer:
            self._frame_deadline = math.inf
        elif self._frame_deadline == math.inf:
            self._frame_deadline = trio.current_time() + FRAME_TIMEOUT
        self._budget.adjust(len(self._buffer) - self._held)
        self._held = len(self._buffer)

    async def _receive_some(self, limit: int = _READ) -> bytes:
        """What the socket holds (up to ``limit`` bytes), waiting for it if it holds nothing;
        a schedule point, as ``receive_some`` is, but one task switch per wake-up rather than
        two (a daemon reads a thousand pongs a second this way).

        Raises:
            OSError: the connection broke (or was closed here: ``EBADF``).
            trio.ClosedResourceError: it was closed here while this waited (anyio's on asyncio).
        """
        fd = self._stream.socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the connection was closed")
        waited = False
        if self._drained:  # skip a read that would find nothing
            await self._wait_readable(fd)
            waited = True
        else:
            await self._checkpoint_if_cancelled()
        while True:
            try:
                chunk = os.read(fd, limit)
            except BlockingIOError:
                await self._wait_readable(fd)
                waited = True
            else:
                break
        self._drained = 0 < len(chunk) < limit
        if not waited:
            # It was ready at once: let the others run, without a cancellation that would
            # lose the bytes just read (it was checked before the read).
            await self._cancel_shielded_checkpoint()
        return chunk

    def leave_budget(self) -> None:
        """Read outside the server's shared budget from now on, giving back what this holds:
        for a peer the server admitted (a harness), whose large frames (a snapshot) must never
        wait on strangers' half-written ones; one frame of ``MAX_FRAME`` at most is its own."""
        if self._budget is not None:
            self._budget.adjust(-self._held)
            self._budget = None
            self._held = 0
            self._frame_deadline = math.inf

    async def refuse(self, error: ProtocolError, *, code: int = 0, drain: bool = False) -> None:
        """Tell the peer why it was refused (best effort; ``code``: the sysexits code for a
        command-line client), then close. ``drain``: first read what it sent, until it closes
        (1 s at most), so its unread request cannot turn our close into its ``ECONNRESET``
        before it reads why."""
        with trio.move_on_after(1), contextlib.suppress(ChannelClosed, ProtocolError):
            await self.send(Error(error.reason, code))
            with contextlib.suppress(*_GONE):
                while drain and await self._stream.receive_some(65536):
                    pass
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection, and give back what it held of the budget; idempotent."""
        self._buffer = bytearray()
        self._account()
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
