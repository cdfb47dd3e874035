"""``tether.mcp.stdio_client`` against the MCP SDK's own ``stdio_client``, side by side in one run.

Run with ``make bench`` (or ``python benchmarks/mcp_clients.py [--rounds R] [--calls N]``).
The server is tests/data/mcp_server.py, written with the SDK's server API; its ``escape`` tool
starts a ``sleep`` in its own session, as a server's background worker would.

1. Owner SIGKILLed: a client process starts the server, calls ``escape``, then calls ``hang``
   and is SIGKILLed mid-call. After ``2 * grace + 1`` s (grace 2 s, the SDK's), the processes
   still carrying the run's mark are counted (and then killed). Once with the server as written
   (it exits at its stdin's end) and once ``--stubborn`` (it ignores that and SIGTERM).
2. Cost, on trio and on asyncio, the two clients alternately, each round a fresh server:
   ``initialize`` + one ``call_tool`` (inside the context), the same plus the context's entry
   and exit (spawn to the server's end), and the median of ``--calls`` ``call_tool`` round
   trips on one session. Ratios are tether / SDK.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client as sdk_stdio_client

import tether.mcp

SERVER = str(Path(__file__).parent.parent / "tests" / "data" / "mcp_server.py")
GRACE = 2.0
MARK = "TETHER_BENCH_MCP"
CLIENTS: dict[str, Callable[[StdioServerParameters, TextIO], AbstractAsyncContextManager[Any]]] = {
    "SDK stdio_client": sdk_stdio_client,
    "tether.mcp.stdio_client": tether.mcp.stdio_client,
}
KILLED_CLIENT = textwrap.dedent(
    """
    import sys, anyio, tether.mcp
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main():
        params = StdioServerParameters(command=sys.executable, args=sys.argv[3:],
                                       env={"TETHER_BENCH_MCP": sys.argv[2]})
        client = tether.mcp.stdio_client if sys.argv[1] == "tether" else stdio_client
        async with client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("escape", {"seconds": 600})
            print("calling", flush=True)
            await session.call_tool("hang", {})

    anyio.run(main)
    """
)


def marked(token: str) -> list[int]:
    """Every process whose environment carries ``TETHER_BENCH_MCP=token``."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def survivors(client: str, stubborn: bool) -> int:
    """Run the owner-SIGKILL scenario once; how many of the server's processes outlive it."""
    token = uuid.uuid4().hex
    args = [SERVER, "--stubborn"] if stubborn else [SERVER]
    which = "tether" if client.startswith("tether") else "sdk"
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, which, token, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert owner.stdout is not None
    with owner.stdout:
        assert owner.stdout.readline().strip() == "calling"
    time.sleep(0.2)  # the call to `hang` reaches the server
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    time.sleep(2 * GRACE + 1)
    left = marked(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return len(left)


async def one_round(client: str, calls: int, quiet: TextIO) -> tuple[float, float, float]:
    """Seconds for initialize + call_tool, for the whole context, and the median call."""
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    started = time.perf_counter()
    return await _timed(CLIENTS[client](params, quiet), started, calls)


async def _timed(
    context: AbstractAsyncContextManager[Any], started: float, calls: int
) -> tuple[float, float, float]:
    async with context as (read, write), ClientSession(read, write) as session:
        entered = time.perf_counter()
        await session.initialize()
        await session.call_tool("echo", {"text": "hi"})
        first = time.perf_counter() - entered
        each = []
        for _ in range(calls):
            before = time.perf_counter()
            await session.call_tool("echo", {"text": "hi"})
            each.append(time.perf_counter() - before)
    whole = time.perf_counter() - started - sum(each)
    return first, whole, statistics.median(each)


def cost(loop: str, rounds: int, calls: int) -> dict[str, list[tuple[float, float, float]]]:
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CLIENTS}
    with open(os.devnull, "w") as quiet:  # the servers' stderr
        for n in range(rounds):
            order = list(CLIENTS) if n % 2 == 0 else list(reversed(CLIENTS))
            for client in order:
                results[client].append(anyio.run(one_round, client, calls, quiet, backend=loop))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--kills", type=int, default=2)
    options = parser.parse_args()

    print("## MCP server processes left after the client is SIGKILLed mid-call")
    print(f"(counted {2 * GRACE + 1:g} s after the kill; {options.kills} runs each)\n")
    print("| server | SDK stdio_client | tether.mcp.stdio_client |")
    print("| --- | --- | --- |")
    for stubborn in (False, True):
        counts = {c: [survivors(c, stubborn) for _ in range(options.kills)] for c in CLIENTS}
        label = "ignores stdin's end and SIGTERM" if stubborn else "exits at stdin's end"
        cells = [" ".join(str(n) for n in counts[c]) for c in CLIENTS]
        print(f"| {label} (server + `setsid` grandchild) | {cells[0]} | {cells[1]} |")

    print(f"\n## Cost: median of {options.rounds} rounds, alternating, a fresh server each\n")
    print("| loop | measure | SDK stdio_client | tether.mcp.stdio_client | tether / SDK |")
    print("| --- | --- | --- | --- | --- |")
    for loop in ("trio", "asyncio"):
        results = cost(loop, options.rounds, options.calls)
        names = (
            "initialize + call_tool",
            "spawn to exit (+ initialize, call_tool)",
            f"one call_tool (median of {options.calls})",
        )
        for index, measure in enumerate(names):
            sdk, ours = (statistics.median(r[index] for r in results[c]) for c in CLIENTS)
            print(
                f"| {loop} | {measure} | {sdk * 1000:.2f} ms | {ours * 1000:.2f} ms"
                f" | {ours / sdk:.2f} |"
            )


if __name__ == "__main__":
    main()
