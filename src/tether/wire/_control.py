"""The control protocol's vocabulary, shared by the daemon and every client: what a
``Control`` asks (``ControlOp``), where a client looks for the daemon (``default_socket``), and
what a client says when it cannot reach it (the async and the blocking client say the same).
Nothing here imports trio, so a one-shot command (``tether ps``) does not pay for it."""

from __future__ import annotations

import enum
import os

BUSY_FOR = 5.0
"""Seconds a client waits for room in a daemon's full listen queue."""
NO_ANSWER = "agentd closed the connection without an answer"


def unreachable(socket_path: str, exc: OSError) -> str:
    """Why a client could not connect: nobody listens at ``socket_path``."""
    return f"no agentd at {socket_path}: {exc.strerror or exc}"


def busy(socket_path: str, waited: float) -> str:
    """Why a client gave up connecting: the listen queue stayed full for ``waited`` seconds."""
    return f"agentd at {socket_path} is busy: its listen queue stayed full for {waited:g}s"


def default_socket() -> str:
    """``$TETHER_AGENTD``, else ``/tmp/tether-<uid>/agentd.sock``."""
    return os.environ.get("TETHER_AGENTD") or f"/tmp/tether-{os.getuid()}/agentd.sock"


class ControlOp(enum.StrEnum):
    """What a ``Control`` request asks the daemon to do."""

    PS = "ps"
    START = "start"
    SEND = "send"
    STOP = "stop"
    RESET = "reset"
    EVENTS = "events"
    LOGS = "logs"

    @property
    def takes_session(self) -> bool:
        return self not in (ControlOp.PS, ControlOp.EVENTS)

    @property
    def takes_text(self) -> bool:
        return self is ControlOp.SEND

    @property
    def needs_session(self) -> bool:
        """It acts on an existing session (unless the request says ``create``)."""
        return self in (ControlOp.SEND, ControlOp.STOP, ControlOp.RESET, ControlOp.LOGS)

    @property
    def streams(self) -> bool:
        """It answers with a stream of replies (``events``, ``logs``)."""
        return self in (ControlOp.EVENTS, ControlOp.LOGS)
