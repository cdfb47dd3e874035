"""``request``: one control request and its one reply, over a blocking socket, without trio.

``tether ps``, ``start``, ``send``, ``stop`` and ``reset`` each send one ``Control`` and read one
``Reply``, so they need neither trio nor the daemon's code: the interpreter, the wire's codec
and this, about 50 ms from a shell on the 2-core VM here (trio's import alone is 80 ms), as a
user of ``systemctl status`` would expect. The streams (``events``, ``logs``, ``ps --watch``)
use the async client (``tether.agentd._client``). Every failure is a ``CliError`` carrying the
same line and sysexits code as the async client's ``AgentdError``.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from ..wire._codec import HEADER, ProtocolError, decode, encode, frame_length
from ..wire._control import BUSY_FOR, NO_ANSWER, STARTING_FOR, busy, starting, unreachable
from ..wire._messages import Control, Error, Reply
from ._errors import EX_DATAERR, EX_PROTOCOL, EX_TEMPFAIL, EX_UNAVAILABLE, CliError


def request(
    socket_path: str,
    op: str,
    session: str = "",
    text: str = "",
    *,
    create: bool = False,
    wait: bool = True,
    prompt_id: str = "",
    wait_reply: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Send one ``Control`` and return the daemon's ``Reply``; wait at most ``timeout`` for it
    (``None``: as long as the daemon's own bounds take).

    Raises:
        CliError: the request is too large (65), nobody listens (69), the daemon stayed busy or
            did not answer within ``timeout`` (75), or answered with nonsense (76); or the
            daemon refused it (its reason and code).
    """
    try:
        control = Control(
            op, session, text, create=create, wait=wait, prompt_id=prompt_id,
            wait_reply=wait_reply,
        )  # fmt: skip
        frame = encode(control)
    except ProtocolError as exc:
        raise CliError(EX_DATAERR, f"the {op} request cannot be sent: {exc.reason}") from None
    with _connect(socket_path) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(frame)
            answer = decode(_read_frame(sock))
        except TimeoutError:
            raise CliError(EX_TEMPFAIL, f"no answer from agentd within {timeout:g}s") from None
        except ProtocolError as exc:
            raise CliError(EX_PROTOCOL, f"agentd closed the connection: {exc}") from None
        except OSError as exc:
            reason = f"agentd closed the connection: {exc.strerror or exc}"
            raise CliError(EX_PROTOCOL, reason) from None
    if isinstance(answer, Error):
        raise CliError(answer.code or 1, answer.reason)
    if not isinstance(answer, Reply):
        raise CliError(EX_PROTOCOL, f"agentd answered with {type(answer).__name__}")
    return answer.result


def _connect(socket_path: str) -> socket.socket:
    """A connection to the daemon; one that is starting (``starting``) is waited for."""
    deadline = time.monotonic() + STARTING_FOR
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(BUSY_FOR)  # a full listen queue keeps a blocking connect waiting
        try:
            sock.connect(socket_path)
        except TimeoutError:
            sock.close()
            raise CliError(EX_TEMPFAIL, busy(socket_path, BUSY_FOR)) from None
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            if time.monotonic() < deadline and starting(socket_path):
                time.sleep(0.05)
                continue
            raise CliError(EX_UNAVAILABLE, unreachable(socket_path, exc)) from None
        except OSError as exc:
            sock.close()
            raise CliError(EX_UNAVAILABLE, unreachable(socket_path, exc)) from None
        return sock


def _read_frame(sock: socket.socket) -> bytes:
    header = _read_exactly(sock, HEADER.size, at_boundary=True)
    return _read_exactly(sock, frame_length(header), at_boundary=False)


def _read_exactly(sock: socket.socket, size: int, *, at_boundary: bool) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            if at_boundary and not data:
                raise CliError(EX_PROTOCOL, NO_ANSWER)
            raise ProtocolError(f"connection cut mid-frame ({len(data)} of {size} bytes)")
        data += chunk
    return bytes(data)
