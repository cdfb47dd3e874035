"""``serve(path, handler)`` and ``connect(path)``: the daemon's socket, safe on a shared host.

The socket lives in a directory that only its owner can enter (mode 0700, owned by this uid)
and is itself mode 0600; the kernel's ``SO_PEERCRED`` then names every peer, and a peer of
another uid is told why (an ``Error``, code 77) and logged even if the directory was loosened
after start. A frame that is not valid closes its own connection with an ``Error`` and
nothing else.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import secrets
import socket
import stat
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

from .. import _backend
from .._fdstream import connect_unix
from .._private import UnsafeDirectory, check_owned
from .._util import Throttle, trim_heap
from ..channels import ChannelClosed
from ._budget import FrameBudget
from ._codec import ProtocolError
from ._connection import Connection

logger = logging.getLogger("tether.wire")

Handler = Callable[[Connection], Awaitable[object]]


class UnsafeSocketPath(UnsafeDirectory):
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
        check_owned(directory, "socket directory", private=True)
    except UnsafeSocketPath:
        raise
    except UnsafeDirectory as exc:
        raise UnsafeSocketPath(str(exc)) from None


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
    raise _in_use(path)


def _in_use(path: str) -> OSError:
    return OSError(errno.EADDRINUSE, "another server is listening on it", path)


async def _publish(sock: trio.socket.SocketType, path: str, backlog: int) -> None:
    """Bind and listen under a private name, then link it to ``path``: a client never finds
    the socket before it accepts (a bind at ``path`` leaves a window of ECONNREFUSED, which a
    client takes for "no server"), and a second server loses with EADDRINUSE, not by
    replacing the first."""
    staging = os.path.join(os.path.dirname(path), f".{secrets.token_hex(4)}")
    await sock.bind(staging)
    try:
        os.chmod(staging, 0o600)
        sock.listen(backlog)
        os.link(staging, path)
    except FileExistsError:
        raise _in_use(path) from None
    finally:
        os.unlink(staging)


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
    fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM), it retries every 100 ms
    and logs one line as the burst begins and one as it ends, so the server stays up. The
    connections share one ``FrameBudget`` for their unfinished frames. A handler that
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
        await _publish(sock, path, backlog)
        inode = os.stat(path).st_ino
    except BaseException:
        sock.close()
        raise
    try:
        async with trio.open_nursery() as nursery:
            listener = trio.SocketListener(sock)
            task_status.started()
            await _accept(listener, _Server(handler).handle, nursery)
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)  # before the close, so the file never names a dead socket
        except FileNotFoundError:
            pass  # removed by someone else already
        sock.close()


_SHORT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_RETRY = 0.1
"""Seconds between tries to accept while the process is short of descriptors or memory."""


def reserve() -> int:
    """Descriptors a server keeps for its own work (reading ``/proc``, spawning, its store)
    rather than for more peers: 64 and a sixteenth of its limit, but never more than a
    quarter of it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 64 if soft == resource.RLIM_INFINITY else min(64 + soft // 16, soft // 4)


def _room(listener: trio.SocketListener, keep: int) -> bool:
    """Whether a new peer would leave ``keep`` descriptors free (the kernel hands out the
    lowest free number, so a probe's number is about how many are open)."""
    try:
        probe = os.dup(listener.socket.fileno())
    except OSError:
        return False
    os.close(probe)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft == resource.RLIM_INFINITY or probe < soft - keep


async def _accept_one(listener: trio.SocketListener, keep: int) -> trio.SocketStream:
    """The next peer, if taking it leaves ``keep`` descriptors free.

    Raises:
        OSError: ``EMFILE`` (too few would be left) or whatever ``accept`` raises.
    """
    if not _room(listener, keep):
        raise OSError(errno.EMFILE, f"fewer than {keep} descriptors would be left")
    return await listener.accept()


async def _accept(
    listener: trio.SocketListener,
    handle: Callable[[trio.SocketStream], Awaitable[object]],
    nursery: trio.Nursery,
) -> NoReturn:
    """Accept connections forever, each handled in ``nursery``, as long as that leaves the
    server its ``reserve`` of descriptors (else the peers wait in the listen queue: a flood
    of clients must not leave the daemon unable to read ``/proc`` or start a harness). Short
    of descriptors or memory, it retries every ``ACCEPT_RETRY`` seconds and says so once per
    burst: one warning when the burst begins, one line when it ends, with how long and how
    many tries (a traceback on every try filled the log, issue 26)."""
    short_since: float | None = None
    tries = 0
    keep = reserve()
    while True:
        try:
            stream = await _accept_one(listener, keep)
        except OSError as exc:
            if exc.errno not in _SHORT_OF:
                raise
            if short_since is None:
                short_since = trio.current_time()
                logger.warning("cannot accept connections now (%s); retrying", exc.strerror)
            tries += 1
            await trio.sleep(ACCEPT_RETRY)
            continue
        if short_since is not None:
            logger.warning(
                "accepting connections again after %.1fs (%d tries)",
                trio.current_time() - short_since,
                tries,
            )
            short_since, tries = None, 0
        nursery.start_soon(handle, stream)


TRIM_AFTER = 256
"""Connections closed since the heap was last trimmed that make it worth trimming again."""


EX_NOPERM = 77
"""The sysexits code a refused peer of another uid is given (``tether send`` exits with it)."""


class _Server:
    """What a server's connections share: the budget for unfinished frames, the refusal
    log's throttle (a line a minute per peer pid), and a count of them, so the memory a
    burst of connections freed is given back once the burst has passed."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.budget = FrameBudget()
        self.refusals = Throttle(logger)
        self.open = 0
        self.closed = 0
        """Connections closed since the last trim."""

    async def handle(self, stream: trio.SocketStream) -> None:
        self.open += 1
        try:
            await self._converse(Connection._create(stream, self.budget))
        finally:
            self.open -= 1
            self.closed += 1
            if self.closed >= TRIM_AFTER and self.open * 4 < self.closed:
                self.closed = 0
                trim_heap()

    async def _converse(self, connection: Connection) -> None:
        async with connection:
            if connection.peer.uid != os.getuid():
                me, peer = os.getuid(), connection.peer
                why = f"uid {peer.uid} may not use this agentd: only uid {me} may connect"
                logger.warning("refused a connection from pid %d: %s", peer.pid, why)
                await connection.refuse(ProtocolError(why), code=EX_NOPERM, drain=True)
                return
            try:
                await self.handler(connection)
            except ProtocolError as exc:
                self.refusals.warn(
                    str(connection.peer.pid),
                    "closing the connection of pid %d: %s",
                    connection.peer.pid,
                    exc.reason,
                )
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
    if not _backend.on_trio():
        try:
            return Connection._create(await connect_unix(path))
        except BlockingIOError:
            raise ServerBusy(errno.EAGAIN, "the server's listen queue is full", path) from None
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
