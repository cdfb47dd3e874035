"""``events`` and ``logs``: what an operator streams from a running daemon over its socket.

``tether events`` gets the last lines of the event log, then (with ``follow``) every event as
it happens, from a subscription made before the history is read (an event at the seam may
come twice, none is lost). ``tether logs SESSION`` gets the end of the session's harness log,
then (with ``follow``) what is appended, reopening the file if it was rotated. Each item is one
``Reply``; without ``follow`` a ``{"end": true}`` closes the stream. A follower that goes away
is noticed at once (its end of file), so it holds no task or descriptor.

Any tool an agent runs can replace its session's log: the daemon reads only a regular file it
opened itself (never through a symlink, never a device or a FIFO: ``UnsafeFeed``), at most
``LOG_BYTES`` for the tail and ``CHUNK`` per read while following, and at most ``MAX_LINES``
events, read from the end of the log (issue 26).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, BinaryIO

import trio

from ..channels import ChannelClosed, Receiver
from ..wire import Connection, Reply
from ._connections import send_within
from ._events import AgentEvent
from ._outcomes import AgentdError

EVENT_LINES = 20
"""Past events ``tether events`` shows by default."""
MAX_LINES = 10_000
"""Past events, or log lines, one request may ask for; more is cut to this."""
LOG_BYTES = 16 * 1024
"""Bytes of a harness log ``tether logs`` shows by default (its last lines within them)."""
CHUNK = 32 * 1024
POLL = 0.25


async def stream_events(
    connection: Connection,
    history: str | os.PathLike[str] | None,
    subscribe: Callable[[], Receiver[AgentEvent]],
    *,
    session: str,
    lines: int,
    follow: bool,
) -> None:
    """Send the event log's last ``lines`` events (of ``session``, if given), then follow."""
    feed = subscribe() if follow else None
    count = min(lines or EVENT_LINES, MAX_LINES)
    try:
        past = await trio.to_thread.run_sync(_tail_events, history, session, count)
        for record in past:
            await send_within(connection, Reply({"event": record}))
        if feed is None:
            await send_within(connection, Reply({"end": True}))
            return

        async def forward() -> None:
            async for event in feed:
                if not session or event.session == session:
                    await send_within(connection, Reply({"event": event.to_json()}))

        await _while_there(connection, forward)
    except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        if feed is not None:
            feed.close()


async def stream_log(connection: Connection, path: str, *, lines: int, follow: bool) -> None:
    """Send the end of the log at ``path`` (its last ``lines`` lines if given), then follow.
    Every read goes through a thread: a slow disk stalls this stream, not the daemon.

    Raises:
        UnsafeFeed: ``path`` is not a regular file (a symlink, a device, a FIFO).
    """
    try:
        handle = await _open_regular(path)
    except FileNotFoundError:
        await send_within(connection, Reply({"text": "", "missing": path}))
        await send_within(connection, Reply({"end": True}))
        return
    try:
        text = await _tail_text(handle, min(lines, MAX_LINES))
        await send_within(connection, Reply({"text": text}))
        if not follow:
            await send_within(connection, Reply({"end": True}))
            return

        async def forward() -> None:
            nonlocal handle
            while True:
                data = await handle.read(CHUNK)
                if data:
                    await send_within(connection, Reply({"text": data.decode(errors="replace")}))
                elif await trio.to_thread.run_sync(_rotated, handle.wrapped, path):
                    await handle.aclose()
                    handle = await _open_regular(path)
                else:
                    await trio.sleep(POLL)

        await _while_there(connection, forward)
    except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError, FileNotFoundError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await handle.aclose()


class UnsafeFeed(AgentdError):
    """A session's log is not a regular file the daemon may read (a symlink, a device, a
    FIFO): refused, not read."""


def _open(path: str, session: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, never following a symlink and
    never waiting for a FIFO's writer.

    Raises:
        FileNotFoundError: there is none.
        UnsafeFeed: it is something else.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFeed(session, f"{path} is a symlink; not following it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFeed(session, f"{path} is not a regular file ({_kind(mode)}); not reading it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):  # fmt: skip
        if test(mode):
            return name
    return "not a file"


async def _open_regular(path: str) -> Any:
    session = os.path.basename(os.path.dirname(path))
    return trio.wrap_file(await trio.to_thread.run_sync(_open, path, session))


async def _while_there(connection: Connection, body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` until it returns or the peer closes its end (a follower that went away)."""
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            try:
                async for _ in connection:
                    pass  # a follower has nothing more to say
            except Exception:  # noqa: BLE001 - whatever ends the peer's side, it is gone
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await body()
        nursery.cancel_scope.cancel()


def _tail_events(
    path: str | os.PathLike[str] | None, session: str, count: int
) -> list[dict[str, Any]]:
    """The last ``count`` events (of ``session``, if given), read from the end of the log
    backwards, so memory is bounded by ``count`` however large the log is."""
    if path is None:
        return []
    try:
        log = _open(os.fspath(path), session or "events")
    except FileNotFoundError:
        return []
    kept: list[dict[str, Any]] = []
    with log:
        for line in _lines_backwards(log):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a full disk
            if type(record) is dict and (not session or record.get("session") == session):
                kept.append(record)
                if len(kept) == count:
                    break
    kept.reverse()
    return kept


def _lines_backwards(log: BinaryIO) -> Iterator[bytes]:
    """The file's lines, last first (its last line even if cut)."""
    position = log.seek(0, os.SEEK_END)
    rest = b""
    while position > 0:
        step = min(CHUNK, position)
        position -= step
        log.seek(position)
        block = log.read(step) + rest
        lines = block.split(b"\n")
        rest = lines.pop(0)  # may continue in the block before
        for line in reversed(lines):
            if line:
                yield line
    if rest:
        yield rest


async def _tail_text(handle: Any, lines: int) -> str:
    size = await handle.seek(0, os.SEEK_END)
    await handle.seek(max(0, size - LOG_BYTES))
    text: str = (await handle.read(LOG_BYTES)).decode(errors="replace")
    if size > LOG_BYTES:
        text = text.split("\n", 1)[-1]  # from the first whole line
    if lines:
        text = "".join(text.splitlines(keepends=True)[-lines:])
    return text


def _rotated(handle: Any, path: str) -> bool:
    try:
        return os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False
