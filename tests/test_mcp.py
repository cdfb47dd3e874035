"""Issue 46: ``tether.mcp.stdio_client`` with the official MCP SDK's client (``ClientSession``)
and a real server written with the SDK's server API (tests/data/mcp_server.py), on trio and
asyncio: a client SIGKILLed mid-call leaves no survivor (its server's ``setsid`` grandchild
included) within ``2 * grace + 1`` s; a server that ignores stdin's end and SIGTERM is gone
within the ladder's bound when the client leaves normally; a process left holding the server's
stdout is named; a command that cannot run is an ``OSError``, as with the SDK's own client.

Skipped without the MCP SDK (``pip install 'tether[mcp]'``); under
``TETHER_REQUIRE_THIRD_PARTY=1`` (CI) a missing SDK fails instead."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from helpers import alive, marked, python, third_party, unique_session, wait_until
from loops import both_loops, both_loops_asyncio_slow
from test_doc_blocks import block

third_party("mcp", "mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

import tether.mcp  # noqa: E402

SERVER = str(Path(__file__).parent / "data" / "mcp_server.py")
GRACE = 0.3
HEADROOM = 5.0  # a loaded 2-core machine; the tight bounds are in benchmarks/mcp_clients.py

CLIENT = """
    import sys, anyio, tether.mcp
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters

    async def main():
        params = StdioServerParameters(command=sys.executable, args=[sys.argv[2]])
        async with tether.mcp.stdio_client(params, grace=float(sys.argv[3]),
                                           session=sys.argv[4]) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                escaped = await session.call_tool("escape", {"seconds": 600})
                print(escaped.content[0].text, flush=True)
                await session.call_tool("hang", {})

    anyio.run(main, backend=sys.argv[1])
"""


@pytest.fixture(autouse=True)
def settled(orphans_settled: None) -> None:
    """A SIGKILLed client orphans its keeper here, which exits once the tree is stopped."""


def params(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[SERVER, *args])


@pytest.mark.parametrize("loop", ["trio", pytest.param("asyncio", marks=pytest.mark.slow)])
async def test_a_client_sigkilled_mid_call_leaves_no_survivor(loop: str) -> None:
    session = unique_session()
    client = subprocess.Popen(
        python(CLIENT, loop, SERVER, str(GRACE), session),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert client.stdout is not None
    with client.stdout:
        escaped = psutil.Process(int(client.stdout.readline()))  # `hang` is called next
    tree = marked(session)
    assert escaped in tree
    assert len(tree) == 2, tree  # the server and its grandchild
    client.kill()
    client.wait()
    killed = time.monotonic()
    await wait_until(lambda: not any(map(alive, tree)), timeout=2 * GRACE + 1 + HEADROOM)
    assert time.monotonic() - killed < 2 * GRACE + 1 + HEADROOM
    assert marked(session) == []


@both_loops_asyncio_slow
async def test_a_server_ignoring_eof_and_sigterm_is_gone_within_the_ladder() -> None:
    """stdin closed, ``grace``, SIGTERM, ``grace``, SIGKILL: the server and its grandchild
    (which inherited the ignored SIGTERM) are both gone when the context is left."""
    async with tether.mcp.stdio_client(params("--stubborn"), grace=GRACE) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            answer = await session.call_tool("echo", {"text": "still here"})
            assert answer.content[0].text == "still here"  # type: ignore[union-attr]
            escaped = await session.call_tool("escape", {"seconds": 600})
            grandchild = psutil.Process(int(escaped.content[0].text))  # type: ignore[union-attr]
            server = grandchild.parent()  # type: ignore[union-attr]  # not in its session
        left = time.monotonic()
    took = time.monotonic() - left
    assert not alive(grandchild)
    assert server is None or not alive(server)
    assert took >= 2 * GRACE - 0.05, "it took SIGKILL, after stdin's grace and SIGTERM's"
    assert took < tether.mcp._stdio.FLUSH + 2 * GRACE + 1 + HEADROOM


@both_loops_asyncio_slow
async def test_a_process_holding_the_server_s_stdout_is_named_and_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server exits at its stdin's end (within a grace long enough on a loaded machine);
    the sleep it left on its stdout is named, then stopped."""
    caplog.set_level(logging.WARNING, "tether.mcp")
    async with (
        tether.mcp.stdio_client(params(), grace=HEADROOM) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        held = await session.call_tool("hold", {"seconds": 600})
        holder = psutil.Process(int(held.content[0].text))  # type: ignore[union-attr]
    assert not alive(holder)
    assert f"pid={holder.pid} cmd=sleep 600 holds its stdout" in caplog.text


@both_loops
async def test_a_command_that_cannot_run_is_an_oserror() -> None:
    """A ``FileNotFoundError``, as the SDK's own client raises (and ``subprocess``)."""
    missing = StdioServerParameters(command="/nonexistent/mcp-server")
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        async with tether.mcp.stdio_client(missing):
            pass  # pragma: no cover


@both_loops_asyncio_slow
async def test_a_cancelled_client_still_stops_the_server_s_whole_tree() -> None:
    """The caller's deadline passes mid-call: the ladder runs whole all the same."""
    session = unique_session()
    with anyio.move_on_after(HEADROOM + 10) as scope:
        async with (
            tether.mcp.stdio_client(params(), grace=GRACE, session=session) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            await client.call_tool("escape", {"seconds": 600})
            tree = marked(session)
            scope.deadline = anyio.current_time()  # cancelled now, inside `hang`
            await client.call_tool("hang", {})
    assert scope.cancelled_caught
    assert len(tree) == 2, tree
    assert not any(map(alive, tree))


async def test_a_nul_byte_in_the_command_is_a_valueerror_as_with_the_sdk() -> None:
    with pytest.raises(ValueError, match="null byte"):
        async with tether.mcp.stdio_client(params("bad\0arg")):
            pass  # pragma: no cover


# A server that writes more than a pipe holds before it reads its stdin to the end: it exits
# cleanly only if someone keeps reading its output.
FLOODER = """
import os, signal, sys
here = sys.argv[1]
def term(*_):
    open(os.path.join(here, "TERM"), "w").close()
    os._exit(143)
signal.signal(signal.SIGTERM, term)
line = '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", '
line += '"data": "' + "x" * 1000 + '"}}\\n'
open(os.path.join(here, "started"), "w").close()
sys.stdout.write(line * 300)
sys.stdout.flush()
sys.stdin.read()
open(os.path.join(here, "clean"), "w").close()
"""


@both_loops_asyncio_slow
async def test_a_cancelled_client_still_drains_the_server_s_output_and_spares_it(
    tmp_path: Path,
) -> None:
    """Found by running the SDK's own stdio tests against this client: a cancelled caller
    must not stop the reading, or the server, blocked writing, never sees its stdin end."""
    server = StdioServerParameters(command=sys.executable, args=["-c", FLOODER, str(tmp_path)])
    with anyio.CancelScope() as scope:
        async with tether.mcp.stdio_client(server, grace=HEADROOM):
            await wait_until((tmp_path / "started").exists)
            scope.cancel()
            await anyio.sleep_forever()
    assert (tmp_path / "clean").exists()
    assert not (tmp_path / "TERM").exists()


@both_loops_asyncio_slow
async def test_a_server_that_dies_ends_the_session_instead_of_hanging_it() -> None:
    async with (
        tether.mcp.stdio_client(params(), grace=GRACE) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        server = next(p for p in _children_running(SERVER))
        server.send_signal(signal.SIGKILL)
        with anyio.fail_after(HEADROOM + 10), pytest.raises(MCPError, match="Connection closed"):
            await session.call_tool("echo", {"text": "anyone?"})


def _children_running(script: str) -> Iterator[psutil.Process]:
    for process in psutil.Process().children(recursive=True):
        try:
            if script in process.cmdline():
                yield process
        except psutil.Error:
            continue


@pytest.mark.slow  # a second client and server, in a fresh interpreter: make test-slow, CI
def test_the_mcp_page_s_client_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "my_server.py").write_text(Path(SERVER).read_text())
    (tmp_path / "client.py").write_text(block("docs/mcp.md", 0))
    done = subprocess.run(
        [sys.executable, "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
