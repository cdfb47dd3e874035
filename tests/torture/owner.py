"""A ``ChildGroup`` owner for the campaign: ``owner.py DIR SEED LOOP``, under ``trio.run`` or
``asyncio.run`` (LOOP: ``trio`` or ``asyncio``; the world alternates them). It runs tools in a loop,
each ``sh`` exiting with a code it chose (some leave a ``setsid`` sleeper behind), and writes
what it asked and what ``run`` reported to ``DIR/results.jsonl``; each tool writes its pid to
``DIR/<token>.pid`` and the group's keeper pid is kept in ``DIR/keeper``, so the nemesis can
find them. SIGUSR1 makes it deaf for a second (its thread blocked, its keeper's reports
unread): an owner killed then dies with frames of its keeper's unread. A third of the tools
run in a short-lived second group that shares the keeper (ADR 0037) and leave a detached
sleeper; what of it is alive once that group closed is written as ``left``. With the MCP SDK
installed, one round in eight is an MCP session instead (``tether.mcp.stdio_client`` and the
SDK's ``ClientSession`` on tests/data/mcp_server.py, its server spawned in the owner's
session): the server's ``escape`` tool leaves a ``setsid`` sleeper, and what of it is alive
once the client's context is left is written as ``left`` too (the nemesis kills and stops
these servers as it does tools)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time

import anyio
import trio

import tether
from tether import _procfs

RUN_TIMEOUT = 20.0
MCP_SERVER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "mcp_server.py")

try:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters

    import tether.mcp
except ImportError:  # the matrix's environments: tools alone
    ClientSession = None  # type: ignore[assignment,misc]


def write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def append(path: str, record: dict[str, object]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


async def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    results = os.path.join(directory, "results.jsonl")
    async with tether.ChildGroup(f"torture-owner-{seed}", 1, grace=0.2) as group:
        n = 0
        while True:
            write(os.path.join(directory, "keeper"), str(group.keeper_pid or ""))
            n += 1
            token = f"o{seed}-{n}"
            code = rng.choice([0, 0, 1, 3, 42])
            sleep = rng.choice([0.0, 0.05, 0.2, 0.5, 1.0])
            escape = "setsid sleep 300 & " if rng.random() < 0.2 else ""
            script = f'echo $$ > "$0.pid"; {escape}sleep {sleep}; exit {code}'
            marker = os.path.join(directory, token)
            record: dict[str, object] = {"token": token, "expect": code}
            try:
                if ClientSession is not None and rng.random() < 1 / 8:
                    record = {"token": f"{token}-mcp", "left": await mcp_round(group.session)}
                elif rng.random() < 1 / 3:
                    record["left"] = await short_group(group.session, script, marker)
                else:
                    result = await group.run(["sh", "-c", script, marker], timeout=RUN_TIMEOUT)
                    record.update(got=result.returncode, lost=result.status_lost,
                                  timed_out=result.timed_out)  # fmt: skip
            except tether.SpawnError as exc:
                record["error"] = type(exc).__name__
            append(results, record)


async def mcp_round(session: str) -> list[int]:
    """One MCP session whose server leaves a ``setsid`` sleeper; the sleeper's pid if it is
    still alive once the context was left, however the session ended (the nemesis may have
    killed or stopped the server)."""
    params = StdioServerParameters(command=sys.executable, args=[MCP_SERVER])
    escaped: int | None = None
    try:
        with anyio.fail_after(RUN_TIMEOUT):
            async with (
                tether.mcp.stdio_client(params, grace=0.2, session=session) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                answer = await client.call_tool("escape", {"seconds": 300})
                escaped = int(answer.content[0].text)  # type: ignore[union-attr]
                await client.call_tool("echo", {"text": session})
    except Exception:  # noqa: BLE001 - a killed server ends its session in an error
        pass
    ident = None if escaped is None else _procfs.identity(escaped)
    if ident is not None and _procfs.state(ident) not in (None, "Z"):
        return [ident[0]]
    return []


DETACHED = 'setsid sh -c \'echo $$ > "$0.esc"; exec sleep 300\' "$0" </dev/null >/dev/null 2>&1 & '


async def short_group(session: str, script: str, marker: str) -> list[int]:
    """Run the tool, with a detached sleeper beside it, in a group of its own; the sleeper's
    pid if it is still alive once that group closed (the group must have stopped it)."""
    async with tether.ChildGroup(session, 1, grace=0.2) as short:
        await short.run(["sh", "-c", DETACHED + script, marker], timeout=RUN_TIMEOUT)
        with anyio.move_on_after(2.0):
            while not os.path.exists(marker + ".esc"):
                await anyio.sleep(0.01)
        try:
            written = await anyio.Path(marker + ".esc").read_text()
            ident = _procfs.identity(int(written))
        except (OSError, ValueError):
            ident = None
    if ident is not None and _procfs.state(ident) not in (None, "Z"):
        return [ident[0]]
    return []


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, lambda *_: time.sleep(1.0))
    if sys.argv[3] == "asyncio":
        asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    else:
        trio.run(main, sys.argv[1], int(sys.argv[2]))
