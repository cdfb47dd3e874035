"""Issue 33 with real harness processes under a real agentd: ``tether inspect`` shows an engine
inside a tool (the tool's process tree and the engine's line), an engine blocked on a channel
whose stray clone a task keeps (the clone's file:line and task: seed 004's shape), a frozen
engine (its connection loop still answers), ``tether ps`` says where a stalled session waits,
a harness that predates inspection is refused politely, and an unknown session is one line
and exit 69."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from helpers import unique_session, wait_until
from tether import Agentd, SqliteEpochStore
from tether.agentd._inspection import Uninspectable

TETHER = [sys.executable, "-m", "tether"]
STALL = 1.5

ENGINE = textwrap.dedent(
    """
    import os, trio, tether
    from tether.wire import Prompt

    if os.environ.get("OLD_HARNESS"):  # a harness of wire revision 4, before inspection
        import tether.harness._loop as loop
        loop.REVISION = 4

    async def stray_keeper(tx, task_status=trio.TASK_STATUS_IGNORED):
        stray = tx.clone()  # STRAY
        task_status.started()
        await trio.sleep_forever()

    async def engine(commands, ctx):
        async for command in commands:
            if not isinstance(command, Prompt):
                continue
            if command.text == "hang-tool":
                await ctx.run_tool("hang", ["sh", "-c", "sleep 600"])  # TOOL
            elif command.text == "stray":
                tx, rx = tether.channel(str, 1, name="results")
                async with trio.open_nursery() as nursery:
                    await nursery.start(stray_keeper, tx, name="stray keeper")
                    tx.close()
                    await rx.recv()  # BLOCKED
            elif command.text == "forever":
                await trio.sleep_forever()  # FROZEN

    raise SystemExit(tether.run_harness(engine))
    """
)


def line_of(marker: str) -> int:
    (number,) = [i for i, line in enumerate(ENGINE.splitlines(), 1) if f"# {marker}" in line]
    return number


@pytest.fixture
def directory(agentd_dir: Path) -> Path:
    (agentd_dir / "engine.py").write_text(ENGINE)
    return agentd_dir


@asynccontextmanager
async def running(directory: Path) -> AsyncIterator[Agentd]:
    argv = [sys.executable, str(directory / "engine.py")]
    async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
        agentd = Agentd(store, directory / "agentd.sock", argv, heartbeat=0.2, grace=0.3,
                        start_timeout=10.0, stall_after=STALL)  # fmt: skip
        async with agentd.running(stop_harnesses=True):
            yield agentd


def engine_entry(found: dict[str, Any]) -> dict[str, Any]:
    (engine,) = [t for t in found["snapshot"]["tasks"] if t["name"] == "engine"]
    return engine


async def inspect_until(agentd: Agentd, session: str, done: Any) -> dict[str, Any]:
    """Inspect until ``done(snapshot)`` holds (the engine may not have reached its wait)."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        return bool(found) and bool(done(found))

    with trio.fail_after(20):
        while True:
            found = await agentd.inspect(session)
            if ready():
                return found
            await trio.sleep(0.05)


def cli(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    socket = ["--socket", str(directory / "agentd.sock")]
    return subprocess.run([*TETHER, *args[:1], *socket, *args[1:]], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


async def test_an_engine_in_a_tool_shows_the_tool_s_tree_and_ps_says_where_it_stalls(
    directory: Path,
) -> None:
    session = unique_session()
    async with running(directory) as agentd:
        await agentd.deliver(session, "hang-tool")
        found = await inspect_until(
            agentd, session,
            # asleep, not only there: a loaded host shows it running until it reaches its sleep
            lambda f: any(p["cmd"] == "sleep 600" and p["state"] == "S"
                          for t in f["snapshot"]["sections"]["tools"] for p in t["processes"]),
        )  # fmt: skip
        engine = engine_entry(found)
        assert (engine["where"]["file"], engine["where"]["line"]) == (
            str(directory / "engine.py"), line_of("TOOL"),
        )  # fmt: skip
        assert engine["wait"]["kind"] == "subprocess"
        (tool,) = found["snapshot"]["sections"]["tools"]
        assert tool["name"] == "hang"
        assert tool["threshold"] == 300
        assert tool["source"] == "default"
        by_cmd = {p["cmd"]: p for p in tool["processes"]}
        shell, sleeper = by_cmd["sh -c sleep 600"], by_cmd["sleep 600"]
        assert shell["pid"] == engine["wait"]["pid"]
        assert shell["cmd"] == "sh -c sleep 600"
        assert sleeper["ppid"] == shell["pid"]
        assert sleeper["wchan"] != ""
        assert found["snapshot"]["sections"]["turn"]["kind"] == "tool"
        assert found["snapshot"]["sections"]["transcript"][-1]["type"] == "tool_call"
        # The person's view, and ps once the session is stalled.
        shown = await trio.to_thread.run_sync(cli, directory, "inspect", session)
        assert shown.returncode == 0, shown.stderr
        assert f"engine waits at {directory / 'engine.py'}:{line_of('TOOL')}" in shown.stdout
        assert "cmd=sleep 600" in shown.stdout
        await wait_until(lambda: bool(_row(agentd, session)["waits"]), timeout=STALL + 20)
        assert _row(agentd, session)["waits"].startswith("engine waits at ")
        ps = await trio.to_thread.run_sync(cli, directory, "ps")
        assert f"engine.py:{line_of('TOOL')}" in ps.stdout


def _row(agentd: Agentd, session: str) -> dict[str, Any]:
    (row,) = [r.to_json() for r in agentd.status() if r.session == session]
    return row


async def test_a_stray_clone_is_named_a_frozen_engine_answers_and_an_old_harness_is_refused(
    directory: Path,
) -> None:
    stray, frozen = unique_session(), unique_session()
    async with running(directory) as agentd:
        await agentd.deliver(stray, "stray")
        found = await inspect_until(
            agentd, stray, lambda f: engine_entry(f)["wait"]["kind"] == "tether_receive"
        )
        engine = engine_entry(found)
        assert engine["where"]["line"] == line_of("BLOCKED")
        (holder,) = engine["wait"]["holders"]
        assert holder["site"] == f"{directory / 'engine.py'}:{line_of('STRAY')}"
        assert holder["task"] == "stray keeper"
        await agentd.deliver(frozen, "forever")
        found = await inspect_until(
            agentd, frozen, lambda f: engine_entry(f)["wait"]["kind"] == "sleep"
        )
        assert engine_entry(found)["where"]["line"] == line_of("FROZEN")
        shown = await trio.to_thread.run_sync(cli, directory, "inspect", frozen, "--json")
        assert shown.returncode == 0, shown.stderr
        assert '"summary": "engine waits at ' in shown.stdout
        unknown = await trio.to_thread.run_sync(cli, directory, "inspect", "no-such-session")
        assert (unknown.returncode, unknown.stdout) == (69, "")
        assert unknown.stderr.count("\n") == 1
        assert "no such session" in unknown.stderr
    old = unique_session()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OLD_HARNESS", "1")
        async with running(directory) as agentd:
            await agentd.start_agent(old)
            with pytest.raises(Uninspectable, match="predates inspection") as refused:
                await agentd.inspect(old)
            assert refused.value.code == 69
            assert _row(agentd, old)["state"] == "attached"  # asking costs it nothing
