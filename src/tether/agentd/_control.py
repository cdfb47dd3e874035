"""``ControlOp`` and ``ControlHandler``: the requests ``tether`` sends over the daemon's socket
(ADR 0012), one enum for the daemon and the command line alike, each answered with a ``Reply``
or an ``Error`` naming why."""

from __future__ import annotations

import errno
import os
from typing import Any, Protocol

import attrs

from ..channels import Receiver
from ..epochs import OwnedElsewhere, StoreUnavailable
from ..process import SpawnError
from ..wire import (
    Connection,
    Control,
    Error,
    Message,
    Prompt,
    ProtocolError,
    Reply,
    TurnEnded,
    encode,
)
from ..wire._control import ControlOp
from ._connections import send_within
from ._events import AgentEvent, EventLog
from ._feeds import UnsafeFeed, stream_events, stream_log
from ._inspection import Uninspectable
from ._outcomes import (
    ANSWERED,
    AgentdError,
    Attached,
    Delivered,
    PromptTooLarge,
    Queued,
    SessionFailed,
    SessionStatus,
    StartFailed,
)
from ._registry import valid_name
from ._state import SessionState
from ._turns import TurnUnknown


class NoSuchSession(AgentdError):
    """``send``, ``stop``, ``reset``, ``logs`` or ``events --session`` named a session the
    daemon does not know."""


# sysexits codes for the command line, by what went wrong (``Error.code``).
EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_TEMPFAIL, EX_CONFIG = 65, 66, 69, 75, 78
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (NoSuchSession, EX_UNAVAILABLE),
    (Uninspectable, EX_UNAVAILABLE),
    (TurnUnknown, EX_UNAVAILABLE),
    (UnsafeFeed, EX_NOINPUT),
    (SessionFailed, EX_UNAVAILABLE),
    (PromptTooLarge, EX_DATAERR),
    (ValueError, EX_DATAERR),
    (SpawnError, EX_CONFIG),
    (AgentdError, EX_TEMPFAIL),
    (OwnedElsewhere, EX_TEMPFAIL),
    (StoreUnavailable, EX_TEMPFAIL),
)


_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN}
"""A spawn that failed for these may work when tried again."""


def code_of(exc: BaseException) -> int:
    """The exit code a command-line client should use for ``exc``."""
    if isinstance(exc, SpawnError) and exc.errno in _TRANSIENT:
        return EX_TEMPFAIL
    if isinstance(exc, StartFailed) and exc.exited:  # a broken harness: trying again won't do
        return EX_CONFIG
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return 1


class Operations(Protocol):
    """What the control requests do: ``Agentd``'s public operations."""

    def status(self) -> list[SessionStatus]: ...

    async def start_agent(self, session_name: str) -> Attached: ...

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered: ...

    async def deliver_later(self, session_name: str, prompt: str | Prompt) -> Queued: ...

    async def turn(self, session_name: str, prompt_id: str) -> TurnEnded: ...

    async def stop_agent(self, session_name: str) -> None: ...

    async def inspect(self, session_name: str) -> dict[str, Any]: ...

    async def reset(self, session_name: str) -> None: ...

    def knows(self, session_name: str) -> bool: ...

    def subscribe(self, capacity: int = 1024) -> Receiver[AgentEvent]: ...

    @property
    def events(self) -> EventLog: ...

    def session_dir(self, name: str) -> str: ...


class ControlHandler:
    """Answers one control request on its connection."""

    def __init__(self, operations: Operations) -> None:
        self.operations = operations

    async def __call__(self, connection: Connection, request: Control) -> None:
        try:
            if await self.stream(connection, request):
                return
            result = await self.run(request)
        except ANSWERED as exc:
            await send_within(connection, Error(str(exc), code_of(exc)))
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
        op = _op(request)
        ops = self.operations
        if op.needs_session and not request.create and not ops.knows(request.session):
            hint = "tether start it, or use --create" if op.can_create else "tether start it"
            raise NoSuchSession(request.session, f"no such session ({hint})")
        if op is ControlOp.PS:
            return {"sessions": [row.to_json() for row in ops.status()]}
        if op is ControlOp.START:
            return attrs.asdict(await ops.start_agent(request.session))
        if op is ControlOp.SEND:
            prompt = _prompt(request)
            if not request.wait:
                return attrs.asdict(await ops.deliver_later(request.session, prompt))
            delivered = await ops.deliver(request.session, prompt)
            if not request.wait_reply:
                return attrs.asdict(delivered)
            turn = await ops.turn(request.session, delivered.prompt_id)
            return {**attrs.asdict(delivered), "turn": attrs.asdict(turn)}
        if op is ControlOp.INSPECT:
            return await ops.inspect(request.session)
        if op is ControlOp.STOP:
            await ops.stop_agent(request.session)
            return {"session": request.session, "state": SessionState.STOPPED}
        await ops.reset(request.session)
        return {"session": request.session, "state": "reset"}

    async def stream(self, connection: Connection, request: Control) -> bool:
        """Answer ``events`` and ``logs`` (a stream of replies); whether it was one.

        Raises:
            NoSuchSession: ``logs``, or ``events`` for one session, of an unknown session
                (the rule of ``send``, ``stop`` and ``reset``).
        """
        op = _op(request)
        if not op.streams:
            return False
        ops = self.operations
        named = bool(request.session) or op is not ControlOp.EVENTS
        if named and (not valid_name(request.session) or not ops.knows(request.session)):
            raise NoSuchSession(request.session, "no such session")
        if op is ControlOp.EVENTS:
            await stream_events(
                connection, ops.events.path, ops.subscribe, session=request.session,
                lines=request.lines, follow=request.follow,
            )  # fmt: skip
            return True
        path = os.path.join(ops.session_dir(request.session), "harness.log")
        await stream_log(connection, path, lines=request.lines, follow=request.follow)
        return True


def _prompt(request: Control) -> str | Prompt:
    """The prompt a ``send`` asks for: with the client's id, if it chose one.

    Raises:
        ProtocolError: an id that is not 1 to 128 letters, digits, ``.``, ``_`` or ``-``.
    """
    if not request.prompt_id:
        return request.text
    if not valid_name(request.prompt_id):
        raise ProtocolError(
            f"a prompt id must be 1 to 128 letters, digits, '.', '_' or '-', not"
            f" {request.prompt_id[:40]!r}"
        )
    return Prompt(request.prompt_id, request.text, {})


def _op(request: Control) -> ControlOp:
    try:
        return ControlOp(request.op)
    except ValueError:
        raise ProtocolError(f"unknown control op {request.op!r}") from None
