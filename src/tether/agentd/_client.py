"""``request``: what ``tether ps|start|send|stop|reset`` send to a running daemon, and
``default_socket``: where they look for it."""

from __future__ import annotations

import os
from typing import Any

from ..channels import ChannelClosed
from ..wire import Control, Error, ProtocolError, Reply, connect
from ._outcomes import AgentdError


def default_socket() -> str:
    """``$TETHER_AGENTD``, else ``/tmp/tether-<uid>/agentd.sock``."""
    return os.environ.get("TETHER_AGENTD") or f"/tmp/tether-{os.getuid()}/agentd.sock"


async def request(socket_path: str, op: str, session: str = "", text: str = "") -> dict[str, Any]:
    """Send one ``Control`` and return the daemon's ``Reply``. Every operation of the daemon
    is bounded, so this is too (wrap it in ``trio.fail_after`` for a tighter bound).

    Raises:
        AgentdError: the daemon refused the request (its reason) or is unreachable.
    """
    try:
        connection = await connect(socket_path)
    except OSError as exc:
        raise AgentdError(session, f"no agentd at {socket_path}: {exc}") from None
    async with connection:
        try:
            await connection.send(Control(op, session, text))
            answer = await connection.receive()
        except (ChannelClosed, ProtocolError) as exc:
            raise AgentdError(session, f"agentd closed the connection: {exc}") from None
    if isinstance(answer, Error):
        raise AgentdError(session, answer.reason)
    if not isinstance(answer, Reply):
        raise AgentdError(session, f"agentd answered with {type(answer).__name__}")
    return answer.result
