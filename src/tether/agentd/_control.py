"""``ControlOp`` and ``ControlHandler``: the requests ``tether`` sends over the daemon's socket
(ADR 0012), one enum for the daemon and the command line alike, each answered with a ``Reply``
or an ``Error`` naming why."""

from __future__ import annotations

import enum
from typing import Any, Protocol

import attrs

from ..wire import Connection, Control, Error, Message, Prompt, ProtocolError, Reply, encode
from ._connections import send_within
from ._outcomes import ANSWERED, Attached, Delivered, SessionStatus
from ._state import SessionState


class ControlOp(enum.StrEnum):
    """What a ``Control`` request asks the daemon to do."""

    PS = "ps"
    START = "start"
    SEND = "send"
    STOP = "stop"
    RESET = "reset"

    @property
    def takes_session(self) -> bool:
        return self is not ControlOp.PS

    @property
    def takes_text(self) -> bool:
        return self is ControlOp.SEND


class Operations(Protocol):
    """What the control requests do: ``Agentd``'s public operations."""

    def status(self) -> list[SessionStatus]: ...

    async def start_agent(self, session_name: str) -> Attached: ...

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered: ...

    async def stop_agent(self, session_name: str) -> None: ...

    async def reset(self, session_name: str) -> None: ...


class ControlHandler:
    """Answers one control request on its connection."""

    def __init__(self, operations: Operations) -> None:
        self.operations = operations

    async def __call__(self, connection: Connection, request: Control) -> None:
        try:
            result = await self.run(request)
        except ANSWERED as exc:
            await send_within(connection, Error(str(exc)))
            return
        try:
            reply: Message = Reply(result)
            encode(reply)
        except ProtocolError as exc:  # a reply too large to frame is refused, not sent
            reply = Error(f"the {request.op} reply cannot be sent: {exc.reason}")
        await send_within(connection, reply)

    async def run(self, request: Control) -> dict[str, Any]:
        """The result of ``request``.

        Raises:
            ProtocolError: an unknown op (the connection is refused).
        """
        try:
            op = ControlOp(request.op)
        except ValueError:
            raise ProtocolError(f"unknown control op {request.op!r}") from None
        ops = self.operations
        if op is ControlOp.PS:
            return {"sessions": [row.to_json() for row in ops.status()]}
        if op is ControlOp.START:
            return attrs.asdict(await ops.start_agent(request.session))
        if op is ControlOp.SEND:
            return attrs.asdict(await ops.deliver(request.session, request.text))
        if op is ControlOp.STOP:
            await ops.stop_agent(request.session)
            return {"session": request.session, "state": SessionState.STOPPED}
        await ops.reset(request.session)
        return {"session": request.session, "state": "reset"}
