"""MCP servers that die with their client: ``stdio_client``, a drop-in for the MCP SDK's own,
whose server runs in a ``ChildGroup`` under tether's keeper, so that it and everything it
started are stopped however the client ends, SIGKILL included (``pip install 'tether[mcp]'``).

Imports the MCP SDK; the rest of tether never imports this package.
"""

from __future__ import annotations

from mcp.client.stdio import StdioServerParameters as StdioServerParameters

from .._util import reexport
from ._stdio import stdio_client as stdio_client

__all__ = ["StdioServerParameters", "stdio_client"]

reexport(globals())
