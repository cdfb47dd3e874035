"""Fakes for users' process tests: a scriptable agentd on a real socket, and child-agent scripts.

``FakeAgentd`` speaks the real wire (``tether.wire``) on a real Unix socket, so the harness under
test cannot tell it from agentd; the test decides each answer. ``agent_script`` writes a small
Python child agent with the behaviour a process test needs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import attrs
import trio

from ..channels import ChannelClosed
from ..wire import (
    Connection,
    Hello,
    Message,
    Ping,
    Pong,
    Prompt,
    ProtocolError,
    Superseded,
    Welcome,
    serve,
)

_GONE = (ChannelClosed, trio.ClosedResourceError, trio.BrokenResourceError)
"""How a connection fails once its harness has left (or ``drop`` closed it)."""


@attrs.define(eq=False)
class FakeAgentd:
    """A daemon a test scripts: answer every ``Hello`` with ``Welcome`` or ``Superseded``,
    send prompts, stop answering pings, drop connections. Serve it with ``serving``.

    ``hellos`` and ``pongs`` record what harnesses said; ``connected`` is set on each welcome.
    """

    path: Path
    """The socket it serves."""
    answer: Literal["welcome", "superseded"] = "welcome"
    """What a hello gets: a welcome, or ``Superseded``."""
    current: int | None = None
    """The epoch named in ``Superseded`` (default: the hello's epoch + 1)."""
    heartbeat: float = 1.0
    """The heartbeat it announces, in seconds."""
    pinging: bool = True
    """Whether it pings harnesses."""
    revision: int = 1
    """The wire revision its ``Welcome`` names: 3 asks harnesses to beat (a ``Pong`` with seq
    0 every heartbeat, unasked), as agentd does."""
    hellos: list[Hello] = attrs.field(factory=list)
    """Every hello received, in order."""
    pongs: list[int] = attrs.field(factory=list)
    """The seq of every pong, in order (0: a beat)."""
    connected: trio.Event = attrs.field(factory=trio.Event)
    """Set on each welcome."""
    _connections: dict[Connection, Hello] = attrs.field(factory=dict)

    @classmethod
    @asynccontextmanager
    async def serving(
        cls, path: str | os.PathLike[str], **options: object
    ) -> AsyncIterator[FakeAgentd]:
        """Serve on ``path`` (its directory must be 0700) until the block exits."""
        daemon = cls(Path(path), **options)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, daemon.path, daemon._handle)
            yield daemon
            nursery.cancel_scope.cancel()

    async def _handle(self, connection: Connection) -> None:
        hello = await connection.receive()
        if not isinstance(hello, Hello):
            raise ProtocolError(f"expected hello, got {type(hello).__name__}")
        self.hellos.append(hello)
        if self.answer == "superseded":
            current = self.current if self.current is not None else hello.epoch + 1
            await connection.send(Superseded(hello.session, hello.epoch, current))
            return
        await connection.send(Welcome(hello.session, hello.epoch, self.heartbeat, self.revision))
        self._connections[connection] = hello
        self.connected.set()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ping, connection)
                with contextlib.suppress(*_GONE):
                    async for message in connection:
                        if isinstance(message, Pong):
                            self.pongs.append(message.seq)
                nursery.cancel_scope.cancel()
        finally:
            del self._connections[connection]

    async def _ping(self, connection: Connection) -> None:
        """Ping every heartbeat until the harness is gone (a failed send ends it quietly: the
        harness left, and the reading side sees the same)."""
        seq = 0
        with contextlib.suppress(*_GONE):
            while True:
                await trio.sleep(self.heartbeat)
                if self.pinging:
                    seq += 1
                    await connection.send(Ping(seq))

    async def send(self, message: Message) -> int:
        """Send ``message`` to every connected harness; to how many."""
        sent = 0
        for connection in list(self._connections):
            try:
                await connection.send(message)
            except ChannelClosed:
                continue
            sent += 1
        return sent

    async def prompt(self, text: str, prompt_id: str = "p1", **meta: object) -> int:
        """Send a ``Prompt`` to every connected harness."""
        return await self.send(Prompt(prompt_id, text, dict(meta)))

    async def supersede(self, current: int) -> int:
        """Tell every connected harness it is superseded by ``current``."""
        sent = 0
        for connection, hello in list(self._connections.items()):
            try:
                await connection.send(Superseded(hello.session, hello.epoch, current))
            except ChannelClosed:
                continue
            sent += 1
        return sent

    async def drop(self) -> None:
        """Close every connection (the harnesses see the daemon go away and reconnect)."""
        for connection in list(self._connections):
            await connection.aclose()


AGENT = """\
import os, signal, sys, time
parts, interval, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
if {ignore_sigint}:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if {daemonize} and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "3600"])
    os._exit(0)
for i in range(parts):
    print(f"part {{i}}", flush=True)
    time.sleep(interval)
sys.exit(code)
"""


def agent_script(
    directory: str | os.PathLike[str],
    *,
    parts: int = 3,
    interval: float = 0.05,
    ignore_sigint: bool = False,
    daemonize: bool = False,
    exit_code: int = 0,
) -> list[str]:
    """Write a child-agent script into ``directory``; the argv that runs it.

    It prints ``parts`` lines ``part N``, one every ``interval`` seconds, then exits with
    ``exit_code``. ``ignore_sigint`` makes it ignore SIGINT (stopping it takes SIGTERM);
    ``daemonize`` double-forks a ``setsid`` ``sleep 3600`` first, a grandchild that escapes.
    """
    path = Path(directory) / f"agent-{uuid.uuid4().hex[:8]}.py"
    path.write_text(AGENT.format(ignore_sigint=ignore_sigint, daemonize=daemonize))
    return [sys.executable, str(path), str(parts), str(interval), str(exit_code)]
