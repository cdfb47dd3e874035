"""``request`` and ``stream``: what ``tether ps|start|send|stop|reset|events|logs`` send to a
running daemon, and ``default_socket``: where they look for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import trio

from ..channels import ChannelClosed
from ..wire import Connection, Control, Error, ProtocolError, Reply, ServerBusy, connect, encode
from ..wire._control import BUSY_FOR, NO_ANSWER, STARTING_FOR, busy, starting, unreachable
from ..wire._control import default_socket as default_socket
from ._outcomes import AgentdError

EX_DATAERR, EX_UNAVAILABLE, EX_PROTOCOL, EX_TEMPFAIL = 65, 69, 76, 75


async def request(
    socket_path: str, op: str, session: str = "", text: str = "", *, create: bool = False
) -> dict[str, Any]:
    """Send one ``Control`` and return the daemon's ``Reply``. Every operation of the daemon
    is bounded, except a ``send``, which waits for an engine to take the prompt while its
    harness is healthy (wrap it in ``trio.fail_after`` for a bound of your own).

    A daemon whose listen queue is full (a burst of clients) is retried with backoff for
    ``BUSY_FOR`` seconds.

    Raises:
        AgentdError: the daemon refused the request (its reason and ``code``), is unreachable
            (69), or stayed busy (75); or the request is too large to send (65).
    """
    async with contextlib.aclosing(
        stream(socket_path, Control(op, session, text, create=create))
    ) as replies:
        async for result in replies:
            return result
    raise AgentdError(session, NO_ANSWER, EX_PROTOCOL)


async def stream(socket_path: str, control: Control) -> AsyncGenerator[dict[str, Any], None]:
    """Send ``control`` and yield each ``Reply`` the daemon sends, until it closes the
    connection or says ``end`` (``events`` and ``logs`` stream; the others answer once).

    Raises:
        AgentdError: as ``request`` says.
    """
    session = control.session
    try:
        encode(control)
    except ProtocolError as exc:
        raise AgentdError(
            session, f"the {control.op} request cannot be sent: {exc.reason}", EX_DATAERR
        ) from None
    connection = await _connect(socket_path, session)
    async with connection:
        try:
            await connection.send(control)
            while True:
                answer = await connection.receive()
                if isinstance(answer, Error):
                    raise AgentdError(session, answer.reason, answer.code or 1)
                if not isinstance(answer, Reply):
                    raise AgentdError(
                        session, f"agentd answered with {type(answer).__name__}", EX_PROTOCOL
                    )
                if answer.result.get("end"):
                    return
                yield answer.result
        except ChannelClosed:
            return
        except ProtocolError as exc:
            reason = f"agentd closed the connection: {exc}"
            raise AgentdError(session, reason, EX_PROTOCOL) from None


async def _connect(socket_path: str, session: str) -> Connection:
    delay = 0.01
    deadline = trio.current_time() + STARTING_FOR
    busy_until: float | None = None
    with trio.move_on_after(BUSY_FOR + STARTING_FOR):
        while True:
            try:
                return await connect(socket_path)
            except ServerBusy:
                busy_until = busy_until or trio.current_time() + BUSY_FOR
                if trio.current_time() >= busy_until:
                    break
                await trio.sleep(delay)
                delay = min(2 * delay, 0.5)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if trio.current_time() < deadline and starting(socket_path):
                    await trio.sleep(0.05)  # a daemon that does not listen yet
                    continue
                raise AgentdError(session, unreachable(socket_path, exc), EX_UNAVAILABLE) from None
            except OSError as exc:
                raise AgentdError(session, unreachable(socket_path, exc), EX_UNAVAILABLE) from None
    raise AgentdError(session, busy(socket_path, BUSY_FOR), EX_TEMPFAIL)
