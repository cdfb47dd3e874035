"""``events`` and ``logs``: what an operator streams from a running daemon over its socket.

``tether events`` gets the last lines of the event log, then (with ``follow``) every event as
it happens, from a subscription made before the history is read (an event at the seam may
come twice, none is lost). ``tether logs SESSION`` gets the end of the session's harness log,
then (with ``follow``) what is appended, reopening the file if it was rotated. Each item is one
``Reply``; without ``follow`` a ``{"end": true}`` closes the stream. A follower that goes away
is noticed at once (its end of file), so it holds no task or descriptor.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..channels import ChannelClosed, Receiver
from ..wire import Connection, Reply
from ._connections import send_within
from ._events import AgentEvent

EVENT_LINES = 20
"""Past events ``tether events`` shows by default."""
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
    try:
        past = await trio.to_thread.run_sync(_tail_events, history, session, lines or EVENT_LINES)
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
    Every read goes through a thread: a slow disk stalls this stream, not the daemon."""
    try:
        handle = await trio.open_file(path, "rb")
    except FileNotFoundError:
        await send_within(connection, Reply({"text": "", "missing": path}))
        await send_within(connection, Reply({"end": True}))
        return
    try:
        await send_within(connection, Reply({"text": await _tail_text(handle, lines)}))
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
                    handle = await trio.open_file(path, "rb")
                else:
                    await trio.sleep(POLL)

        await _while_there(connection, forward)
    except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await handle.aclose()


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
    if path is None:
        return []
    kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=count)
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            for line in log:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut by a full disk
                if type(record) is dict and (not session or record.get("session") == session):
                    kept.append(record)
    except FileNotFoundError:
        return []
    return list(kept)


async def _tail_text(handle: Any, lines: int) -> str:
    size = await handle.seek(0, os.SEEK_END)
    await handle.seek(max(0, size - LOG_BYTES))
    text: str = (await handle.read()).decode(errors="replace")
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
