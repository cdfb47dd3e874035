"""``request``: what ``tether ps|start|send|stop|reset`` send to a running daemon, and
``default_socket``: where they look for it."""

from __future__ import annotations

import os
from typing import Any

import trio

from ..channels import ChannelClosed
from ..wire import Connection, Control, Error, ProtocolError, Reply, ServerBusy, connect, encode
from ._outcomes import AgentdError

BUSY_FOR = 5.0
"""Seconds a client keeps retrying a daemon whose listen queue is full."""


def default_socket() -> str:
    """``$TETHER_AGENTD``, else ``/tmp/tether-<uid>/agentd.sock``."""
    return os.environ.get("TETHER_AGENTD") or f"/tmp/tether-{os.getuid()}/agentd.sock"


async def request(socket_path: str, op: str, session: str = "", text: str = "") -> dict[str, Any]:
    """Send one ``Control`` and return the daemon's ``Reply``. Every operation of the daemon
    is bounded, so this is too (wrap it in ``trio.fail_after`` for a tighter bound).

    A daemon whose listen queue is full (a burst of clients) is retried with backoff for
    ``BUSY_FOR`` seconds.

    Raises:
        AgentdError: the daemon refused the request (its reason), is unreachable, or stayed
            busy; or the request is too large to send.
    """
    control = Control(op, session, text)
    try:
        encode(control)
    except ProtocolError as exc:
        raise AgentdError(session, f"the {op} request cannot be sent: {exc.reason}") from None
    connection = await _connect(socket_path, session)
    async with connection:
        try:
            await connection.send(control)
            answer = await connection.receive()
        except (ChannelClosed, ProtocolError) as exc:
            raise AgentdError(session, f"agentd closed the connection: {exc}") from None
    if isinstance(answer, Error):
        raise AgentdError(session, answer.reason)
    if not isinstance(answer, Reply):
        raise AgentdError(session, f"agentd answered with {type(answer).__name__}")
    return answer.result


async def _connect(socket_path: str, session: str) -> Connection:
    delay = 0.01
    with trio.move_on_after(BUSY_FOR):
        while True:
            try:
                return await connect(socket_path)
            except ServerBusy:
                await trio.sleep(delay)
                delay = min(2 * delay, 0.5)
            except OSError as exc:
                raise AgentdError(session, f"no agentd at {socket_path}: {exc}") from None
    raise AgentdError(
        session, f"agentd at {socket_path} is busy: its listen queue stayed full for {BUSY_FOR:g}s"
    )
