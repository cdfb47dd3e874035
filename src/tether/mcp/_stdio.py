"""``stdio_client``: the MCP SDK's stdio transport, with the server in a ``ChildGroup``.

The SDK's own ``stdio_client`` runs the spec's shutdown when the client leaves it (stdin
closed, then SIGTERM, then SIGKILL), but nothing can run it when the client dies: a SIGKILLed
or OOM-killed client leaves its server, and whatever the server started, running. Here the
server is spawned by the run's keeper (ADR 0023), which stops the group's whole tree,
``setsid`` escapes included, when this process dies however it dies; leaving the context runs
the SDK's ladder over that whole tree, and names a process left holding the server's stdout
(ADR 0056).
"""

from __future__ import annotations

import codecs
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO, TypeAlias

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

try:
    import mcp.types
    from mcp.client.stdio import StdioServerParameters, get_default_environment
    from mcp.shared.message import SessionMessage
except ImportError as exc:  # pragma: no cover - without the extra
    raise ImportError("tether.mcp needs the MCP SDK: pip install 'tether[mcp]'") from exc

from .. import _backend
from .._fdstream import READ_SIZE, PipeStream
from ..process import Child, ChildGroup
from ..process._holders import pipe_holders
from ..process._teardown import stop_processes

logger = logging.getLogger("tether.mcp")

Streams: TypeAlias = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]
"""What ``stdio_client`` yields, as the SDK's does: the server's messages (or the error of a
line that is not one), and the sink of the client's."""

FLUSH = 0.5
"""Seconds for the writer to hand the server what the session already sent before its stdin
closes."""
LINGER = 0.1
"""Seconds to wait for the end of the server's stdout once it exited; past them, whoever holds
it open is named (and stopped with the rest of the tree)."""


@asynccontextmanager
async def stdio_client(
    server: StdioServerParameters,
    errlog: TextIO = sys.stderr,
    *,
    grace: float = 2.0,
    session: str | None = None,
) -> AsyncIterator[Streams]:
    """Start the MCP server ``server`` describes and yield its ``(read, write)`` streams for
    ``mcp.ClientSession``, as ``mcp.client.stdio.stdio_client`` does, on trio or asyncio.

    The server runs in a ``ChildGroup`` under tether's keeper: if this process dies, SIGKILL
    included, the server and everything it started are gone within ``2 * grace + 1`` seconds.
    Leaving the context closes the server's stdin, waits ``grace`` for it to exit, then sends
    SIGTERM to its whole tree (``setsid`` escapes included) and SIGKILL ``grace`` later; a
    process still holding the server's stdout after it exited is named in a warning. The
    ladder runs whole even if the caller is cancelled.

    Args:
        server: the SDK's parameters: command, args, env (over the SDK's default
            environment), cwd, encoding.
        errlog: where the server's stderr goes (its descriptor, or copied if it has none).
        grace: seconds of each step of the ladder (the SDK's are 2).
        session: the ``TETHER_SESSION`` mark of the server's processes (``mcp-<pid>``).

    Raises:
        SpawnError: the command cannot be executed (an ``OSError``, as the SDK raises).
        ValueError: the command or an argument has a NUL byte (as the SDK raises).
    """
    if "\0" in server.command or any("\0" in arg for arg in server.args):
        raise ValueError(f"embedded null byte in the MCP server's command: {server.command!r}")
    env = get_default_environment() | (server.env or {})
    async with ChildGroup(session or f"mcp-{os.getpid()}", 1, grace) as group:
        stderr = _descriptor(errlog)
        child = await group.spawn(
            [server.command, *server.args],
            env=env,
            cwd=server.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr is None else stderr,
            name=os.path.basename(server.command),
        )
        transport = _Transport(group, child, server, errlog)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(transport.read)
            tasks.start_soon(transport.write)
            if stderr is None:
                tasks.start_soon(transport.copy_stderr)
            try:
                yield transport.read_stream, transport.write_stream
            finally:
                await _backend.shielded(transport.shutdown)
                transport.reading.cancel()
                tasks.cancel_scope.cancel()


class _Transport:
    """One server's pipes bridged to the session's memory streams, and its shutdown."""

    def __init__(
        self, group: ChildGroup, child: Child, server: StdioServerParameters, errlog: TextIO
    ) -> None:
        self.group = group
        self.child = child
        self.server = server
        self.errlog = errlog
        self.read_writer, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self.writer_done = anyio.Event()
        self.stdout_ended = anyio.Event()
        self.reading = anyio.CancelScope(shield=True)
        """The reader's scope: a cancelled caller must not stop the reading, or a server
        blocked writing output nobody takes never sees its stdin end and gets SIGTERM."""

    async def read(self) -> None:
        """The server's stdout, line by line, to the session; once the session is gone, read
        and dropped (a server blocked on a full pipe could not exit) until its end."""
        try:
            with self.reading:
                await self._read()
        except _backend.closed_errors():
            pass  # the shutdown closed the pipe under the read
        finally:
            self.stdout_ended.set()

    async def _read(self) -> None:
        decode = codecs.getincrementaldecoder(self.server.encoding)(
            self.server.encoding_error_handler
        ).decode
        stdout, buffer, listening = _opened(self.child.stdout), "", True
        async with self.read_writer:
            while chunk := await stdout.receive_some(READ_SIZE):
                if not listening:
                    continue
                try:
                    *lines, buffer = (buffer + decode(chunk)).split("\n")
                except UnicodeDecodeError as exc:
                    lines, buffer = [], ""
                    listening = await self._deliver(exc)
                for line in lines:
                    if listening and line.strip():
                        listening = await self._deliver(_parse(line))

    async def _deliver(self, item: SessionMessage | Exception) -> bool:
        """Hand ``item`` to the session; whether it still listens."""
        try:
            await self.read_writer.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    async def write(self) -> None:
        """The session's messages to the server's stdin, one JSON line each; if the server
        stops reading, the session's read stream ends (no request waits forever)."""
        stdin = _opened(self.child.stdin)
        broken: tuple[type[BaseException], ...] = (*_backend.closed_errors(), OSError)
        try:
            async with self.write_reader:
                async for message in self.write_reader:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    data = (line + "\n").encode(
                        self.server.encoding, self.server.encoding_error_handler
                    )
                    await stdin.send_all(data)
        except broken:
            await self.read_writer.aclose()
        finally:
            self.writer_done.set()

    async def copy_stderr(self) -> None:
        """The server's stderr to ``errlog``, for an ``errlog`` without a descriptor."""
        decode = codecs.getincrementaldecoder(self.server.encoding)("replace").decode
        stderr = _opened(self.child.stderr)
        try:
            while chunk := await stderr.receive_some(READ_SIZE):
                self.errlog.write(decode(chunk))
                self.errlog.flush()
        except _backend.closed_errors():
            pass

    async def shutdown(self) -> None:
        """The spec's shutdown over the group's whole tree: stdin closed, ``grace`` for the
        server to exit, then SIGTERM to every process left, SIGKILL ``grace`` later."""
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(FLUSH):
            await self.writer_done.wait()
        _opened(self.child.stdin).close()
        with anyio.move_on_after(self.group.grace):
            await self.child.wait()
        if self.child.done:
            with anyio.move_on_after(LINGER):
                await self.stdout_ended.wait()
            if not self.stdout_ended.is_set():
                await self._name_holders()
        await stop_processes(
            self.group.members, [self.child.ref], self.group.grace, interrupt=False
        )  # returns at once if nothing is left
        self.child.close_streams()

    async def _name_holders(self) -> None:
        """Warn of each process that keeps the exited server's output pipes open."""
        holders = await anyio.to_thread.run_sync(pipe_holders, self.child.pipes)
        for holder in holders:
            logger.warning(
                "MCP server %s (pid %d) exited, but %s: stopping it",
                self.server.command, self.child.pid, holder.describe(),
            )  # fmt: skip


def _parse(line: str) -> SessionMessage | Exception:
    """One line of the server's as a message, or the error the session is handed instead."""
    try:
        message = mcp.types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        logger.warning("MCP server sent a line that is not a JSON-RPC message: %s", exc)
        return exc
    return SessionMessage(message)


def _opened(pipe: PipeStream | None) -> PipeStream:
    """A pipe ``stdio_client`` asked ``spawn`` for (``PIPE``): never ``None``."""
    assert pipe is not None
    return pipe


def _descriptor(errlog: TextIO) -> int | None:
    """``errlog``'s descriptor, for the server's stderr; ``None`` if it has none."""
    try:
        return errlog.fileno()
    except (AttributeError, OSError, ValueError):
        return None
