"""``serve(path, handler)`` and ``connect(path)``: the daemon's socket, safe on a shared host.

The socket lives in a directory that only its owner can enter (mode 0700, owned by this uid)
and is itself mode 0600; the kernel's ``SO_PEERCRED`` then names every peer, and a peer of
another uid is refused and logged even if the directory was loosened after start. A frame that
is not valid closes its own connection with an ``Error`` and nothing else.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from functools import partial
from typing import NoReturn

import trio

from ..channels import ChannelClosed
from ._codec import ProtocolError
from ._connection import Connection

logger = logging.getLogger("tether.wire")

Handler = Callable[[Connection], Awaitable[object]]


class UnsafeSocketPath(PermissionError):
    """The socket's directory (or an old file in its place) is not safe to listen in."""


class ServerBusy(BlockingIOError):
    """The server's listen queue was full: the connection was not made, and may be tried
    again (``errno`` is ``EAGAIN``)."""


def check_directory(path: str) -> None:
    """Refuse a socket path whose directory is not a 0700 directory owned by this uid.

    Raises:
        UnsafeSocketPath: naming the directory and what is wrong with it.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        raise UnsafeSocketPath(f"socket directory {directory} does not exist") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeSocketPath(f"{directory} is not a directory")
    if info.st_uid != os.getuid():
        raise UnsafeSocketPath(
            f"socket directory {directory} is owned by uid {info.st_uid}, not {os.getuid()}"
        )
    if info.st_mode & 0o077:
        raise UnsafeSocketPath(
            f"socket directory {directory} has mode {stat.S_IMODE(info.st_mode):04o};"
            " it must be 0700 so no other user can reach the socket"
        )


async def _remove_stale(path: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise UnsafeSocketPath(f"{path} exists and is not a socket; refusing to replace it")
    try:
        stream = await trio.open_unix_socket(path)
    except OSError:
        os.unlink(path)  # nobody listens: a leftover of a server that died
        return
    await stream.aclose()
    raise OSError(errno.EADDRINUSE, "another server is listening on it", path)


BACKLOG = 4096
"""Connections the kernel queues before ``accept`` (it caps this at ``net.core.somaxconn``):
a burst of clients waits in the queue instead of finding it full."""


async def serve(
    path: str | os.PathLike[str],
    handler: Handler,
    *,
    backlog: int = BACKLOG,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen on ``path`` and run ``handler(connection)`` for each peer of this uid, forever.

    ``task_status.started()`` is called once the socket accepts connections. When accepting
    fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM), trio's listener logs it
    and retries after 100 ms, so the server stays up. A handler that
    raises ``ProtocolError`` gets its peer sent ``Error(reason)`` and its connection closed; a
    peer that disconnects (``ChannelClosed``) ends its handler quietly; any other exception is
    a bug and propagates. The socket file is removed when serving stops.

    Raises:
        UnsafeSocketPath: the directory is not 0700 and ours, or ``path`` is not a socket.
        OSError: another server listens on ``path``.
    """
    path = os.fspath(path)
    check_directory(path)
    await _remove_stale(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(backlog)
        inode = os.stat(path).st_ino
    except BaseException:
        sock.close()
        raise
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                trio.serve_listeners, partial(_handle, handler), [trio.SocketListener(sock)]
            )
            task_status.started()
            await trio.sleep_forever()
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except FileNotFoundError:
            pass  # removed by someone else already


async def _handle(handler: Handler, stream: trio.SocketStream) -> None:
    connection = Connection._create(stream)
    async with connection:
        if connection.peer.uid != os.getuid():
            logger.warning(
                "refused a connection from uid %d (pid %d): only uid %d may connect",
                connection.peer.uid,
                connection.peer.pid,
                os.getuid(),
            )
            return
        try:
            await handler(connection)
        except ProtocolError as exc:
            logger.warning("closing the connection of pid %d: %s", connection.peer.pid, exc.reason)
            await connection.refuse(exc)
        except ChannelClosed:
            logger.debug("pid %d went away", connection.peer.pid)


async def connect(path: str | os.PathLike[str]) -> Connection:
    """Connect to the daemon's socket at ``path``.

    Raises:
        ServerBusy: the server's listen queue is full; nothing was connected (try again).
        OSError: nobody listens there (``ConnectionRefusedError``, ``FileNotFoundError``...).
    """
    path = os.fspath(path)
    stream = await trio.open_unix_socket(path)
    try:
        # A non-blocking connect to a full queue fails with EAGAIN, which trio's connect
        # takes for "in progress": the socket it returns was never connected.
        stream.socket.getpeername()
    except OSError as exc:
        await stream.aclose()
        if exc.errno != errno.ENOTCONN:
            raise
        raise ServerBusy(errno.EAGAIN, "the server's listen queue is full", path) from None
    return Connection._create(stream)
