"""An MCP server written with the official SDK's server API, for tests/test_mcp.py and
benchmarks/mcp_clients.py: ``echo``; ``escape`` starts a ``sleep`` in its own session (as a
server's background worker would) and returns its pid; ``hold`` starts one that keeps the
server's stdout; ``hang`` never returns. ``--stubborn``: ignore SIGTERM, and keep running after
stdin ends (what the client's ladder must still end)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("tether-test")


@server.tool()
def echo(text: str) -> str:
    """Say ``text`` back."""
    return text


@server.tool()
def escape(seconds: int) -> int:
    """Start ``sleep seconds`` in its own session; its pid."""
    quiet = subprocess.DEVNULL
    sleeper = subprocess.Popen(
        ["sleep", str(seconds)], start_new_session=True, stdin=quiet, stdout=quiet, stderr=quiet
    )
    return sleeper.pid


PROTOCOL = os.dup(1)
"""The protocol's pipe, as the server got it (the SDK moves it away from the descriptor its
children inherit; a server in another language, or an older one, does not)."""


@server.tool()
def hold(seconds: int) -> int:
    """Start ``sleep seconds`` that keeps this server's protocol pipe open; its pid."""
    sleeper = subprocess.Popen(["sleep", str(seconds)], stdin=subprocess.DEVNULL, stdout=PROTOCOL)
    return sleeper.pid


@server.tool()
async def hang() -> str:
    """Never return."""
    import anyio

    await anyio.sleep_forever()
    return "never"


if __name__ == "__main__":
    stubborn = "--stubborn" in sys.argv
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # its children inherit it, too
    print(f"mcp test server {os.getpid()} up", file=sys.stderr, flush=True)
    try:
        server.run("stdio")
    finally:
        while stubborn:
            time.sleep(3600)
