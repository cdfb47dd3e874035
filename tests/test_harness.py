"""tether.harness: the example harness as a real process against a fake agentd (tether.wire).

Every exit of the exit table, timed from its cause: Superseded (75, child agent SIGINTed, a stray
clone cancelled after grace), SIGTERM mid tool call (143, call sealed naming the sender, tree
gone), resume (no dangling call reaches the engine), and a daemon that vanishes (69). Each runs
twice: the harness under ``trio.run``, then under ``asyncio.run`` (``backend="asyncio"``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from helpers import (
    count_named,
    harness_env,
    kill_marked,
    lingering_killer,
    marked,
    unique_session,
    wait_until,
    zombie_children,
)
from tether import ToolResult, Transcript, wire
from tether.harness import EXIT_DAEMON_GONE, EXIT_SUPERSEDED, run_harness
from tether.harness._budget import STRETCH

GRACE = 0.5
BOUND = 2 * GRACE + 1.0


ASYNCIO_SLOW = pytest.mark.parametrize(
    "backend", ["trio", pytest.param("asyncio", marks=pytest.mark.slow)], indirect=True
)
"""For a test of seconds whose asyncio run ``make test-slow`` (and CI) takes."""


@pytest.fixture(params=["trio", "asyncio"], autouse=True)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The loop the example harness runs on (``TETHER_EXAMPLE_BACKEND``, which it passes to
    ``run_harness``)."""
    loop: str = request.param
    monkeypatch.setenv("TETHER_EXAMPLE_BACKEND", loop)
    return loop


@attrs.define
class FakeAgentd:
    """A daemon that welcomes, sends one prompt, then does what the test tells it to."""

    path: Path
    epoch: int
    supersede: trio.Event = attrs.field(factory=trio.Event)
    hellos: list[wire.Hello] = attrs.field(factory=list)
    prompt: bool = True
    prompt_id: str = "p1"
    """The id of the one prompt it sends (a session's next harness gets a new one)."""
    inspect: trio.Event | None = None
    """Set: send ``Inspect`` then, as a daemon of revision 5, and keep the answer."""
    inspection: wire.Inspection | None = None

    async def handle(self, connection: wire.Connection) -> None:
        hello = await connection.receive()
        assert isinstance(hello, wire.Hello)
        self.hellos.append(hello)
        revision = 1 if self.inspect is None else 5
        await connection.send(wire.Welcome(hello.session, hello.epoch, 1.0, revision))
        if self.prompt:
            await connection.send(wire.Prompt(self.prompt_id, "think", {}))
        if self.inspect is not None:
            await self.inspect.wait()
            await connection.send(wire.Inspect(7))
            while not isinstance(reply := await connection.receive(), wire.Inspection):
                pass  # its beats and its reports of prompts recorded
            self.inspection = reply
        await self.supersede.wait()
        await connection.send(wire.Superseded(hello.session, hello.epoch, self.epoch + 1))
        await trio.sleep_forever()


@asynccontextmanager
async def agentd(
    epoch: int, *, prompt: bool = True, inspect: bool = False
) -> AsyncIterator[tuple[FakeAgentd, trio.CancelScope]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        directory.chmod(0o700)
        daemon = FakeAgentd(directory / "agentd.sock", epoch, prompt=prompt,
                            inspect=trio.Event() if inspect else None)  # fmt: skip

        async def serve(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            # Its own scope, so the test can kill the daemon without cancelling itself.
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as inner:
                    await inner.start(wire.serve, daemon.path, daemon.handle)
                    task_status.started(scope)

        async with trio.open_nursery() as nursery:
            daemon_scope = await nursery.start(serve)
            yield daemon, daemon_scope
            nursery.cancel_scope.cancel()


def start_harness(
    session: str, epoch: int, daemon: FakeAgentd, state: Path, **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.harness.example"],
        env=harness_env(
            session,
            epoch,
            daemon.path,
            state,
            TETHER_GRACE=str(GRACE),
            TETHER_RECONNECT_FOR="1.0",
            TETHER_EXAMPLE_SIGNAL_FILE=str(state / "signals.txt"),
            **env,
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _entries(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _tool_call_on_disk(transcript: Path) -> bool:
    return any(e["type"] == "tool_call" for e in _entries(transcript))


async def _exit_code(harness: subprocess.Popen[str]) -> tuple[int, str, float]:
    """Wait (bounded) for the harness to exit; its code, its log and how long it took."""
    started = time.monotonic()
    with trio.fail_after(BOUND + 5):
        _, log = await trio.to_thread.run_sync(harness.communicate)
    return harness.returncode, log, time.monotonic() - started


@asynccontextmanager
async def cleanup(harness: subprocess.Popen[str], session: str) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.communicate()
        kill_marked(session)


async def test_superseded_exits_75_within_the_bound_and_sigints_the_child_agent(
    tmp_path: Path,
) -> None:
    session = unique_session()
    async with agentd(3) as (daemon, _):
        harness = start_harness(session, 3, daemon, tmp_path)
        async with cleanup(harness, session):
            await wait_until(lambda: _tool_call_on_disk(tmp_path / f"{session}.jsonl"))
            await wait_until(lambda: count_named(session, "sleep") == 1)  # the agent is running
            daemon.supersede.set()
            code, log, took = await _exit_code(harness)
    assert code == EXIT_SUPERSEDED, log
    assert took <= BOUND, f"took {took:.2f}s, bound {BOUND}s"
    assert (tmp_path / "signals.txt").read_text() == "agent got SIGINT\n"
    assert "superseded: this harness holds epoch 3, the current epoch is 4" in log
    assert (
        log.strip().splitlines()[-1].endswith("exiting 75: superseded: epoch 3 < current epoch 4")
    )
    assert marked(session) == []
    assert zombie_children() == []
    hello = daemon.hellos[0]
    assert (hello.session, hello.epoch, hello.pid) == (session, 3, harness.pid)


async def test_an_inspect_is_answered_with_the_engine_and_its_open_tool_call(
    tmp_path: Path, backend: str
) -> None:
    session = unique_session()
    async with agentd(4, inspect=True) as (daemon, _):
        harness = start_harness(session, 4, daemon, tmp_path)
        async with cleanup(harness, session):
            await wait_until(lambda: count_named(session, "sleep") == 1)
            assert daemon.inspect is not None
            daemon.inspect.set()
            await wait_until(lambda: daemon.inspection is not None)
            running = {process.pid for process in marked(session)}
            daemon.supersede.set()
            code, log, _ = await _exit_code(harness)
    assert code == EXIT_SUPERSEDED, log
    assert daemon.inspection is not None
    snapshot = daemon.inspection.snapshot
    assert snapshot["pid"] == harness.pid
    (tool,) = snapshot["sections"]["tools"]
    assert tool["name"] == "agent"
    assert snapshot["sections"]["turn"]["kind"] == "tool"
    names = [task["name"] for task in snapshot["tasks"]]
    assert "engine" in names
    assert "connection loop" in names
    engine = next(task for task in snapshot["tasks"] if task["name"] == "engine")
    assert engine["wait"]["kind"] == "subprocess", engine  # the agent, through ctx.tool
    assert engine["wait"]["pid"] in running
    watcher = next(task for task in snapshot["tasks"] if task["name"] == "signal watcher")
    assert watcher["wait"]["on"] == "channel 'signals'", watcher


async def test_a_stray_sender_clone_cannot_keep_a_superseded_harness_alive(tmp_path: Path) -> None:
    session = unique_session()
    async with agentd(3) as (daemon, _):
        harness = start_harness(session, 3, daemon, tmp_path, TETHER_EXAMPLE_STRAY_CLONE="1")
        async with cleanup(harness, session):
            await wait_until(lambda: _tool_call_on_disk(tmp_path / f"{session}.jsonl"))
            # The agent running, not only its call recorded: superseded between the two, the
            # engine's spawn into its closing group raises and its frame (and the clone) goes.
            await wait_until(lambda: count_named(session, "sleep") == 1)
            daemon.supersede.set()
            code, log, took = await _exit_code(harness)
    assert code == EXIT_SUPERSEDED, log
    assert took <= BOUND, f"took {took:.2f}s, bound {BOUND}s"
    last = log.strip().splitlines()[-1]
    assert "command channel still held by:" in last, log
    assert re.search(r"example\.py:\d+", last), "the holder's line is not named"
    assert marked(session) == []


async def test_sigterm_mid_tool_call_seals_the_call_naming_the_sender(tmp_path: Path) -> None:
    session = unique_session()
    transcript = tmp_path / f"{session}.jsonl"
    async with agentd(5) as (daemon, _):
        harness = start_harness(session, 5, daemon, tmp_path)
        async with cleanup(harness, session):
            await wait_until(lambda: _tool_call_on_disk(transcript))
            await wait_until(lambda: count_named(session, "sleep") == 1)
            killer = lingering_killer("TERM", harness.pid)
            try:
                code, log, took = await _exit_code(harness)
            finally:
                killer.communicate("\n", timeout=10)
    assert code == 128 + signal.SIGTERM, log
    assert took <= BOUND
    call, result = [e for e in _entries(transcript) if e["type"] in ("tool_call", "tool_result")][
        -2:
    ]
    assert result["call_id"] == call["id"]
    assert result["status"] == "interrupted"
    assert f"worker shut down mid-call (SIGTERM from pid {killer.pid}, sh -c" in str(
        result["reason"]
    )
    # The turn's seal says the turn was cut, not a call (issue 41, row 4).
    (turn,) = [e for e in _entries(transcript) if e.get("kind") == "turn_aborted"]
    assert f"worker shut down mid-turn (SIGTERM from pid {killer.pid}, sh -c" in str(
        turn["data"]["reason"]
    )
    assert f"received SIGTERM from pid={killer.pid}" in log
    assert marked(session) == [], "the tool's tree (with its setsid grandchild) survived"
    assert zombie_children() == []


async def test_resume_seals_a_predecessor_s_dangling_call_before_the_engine_starts(
    tmp_path: Path,
) -> None:
    session = unique_session()
    transcript = tmp_path / f"{session}.jsonl"
    async with await Transcript.open(transcript) as tr:
        call = await tr.tool_call("agent", {"prompt": "from a crashed worker"})
    async with agentd(8, prompt=False) as (daemon, _):
        harness = start_harness(session, 8, daemon, tmp_path)
        async with cleanup(harness, session):
            await wait_until(lambda: len(daemon.hellos) == 1)
            daemon.supersede.set()
            code, log, _ = await _exit_code(harness)
    assert code == EXIT_SUPERSEDED, log
    assert "engine started: 0 dangling tool calls" in log
    async with await Transcript.open(transcript) as tr:
        (sealed,) = [e for e in tr.entries if isinstance(e, ToolResult)]
        assert sealed.call_id == call.id
        assert sealed.reason == "session resumed after an unclean shutdown"


@ASYNCIO_SLOW
async def test_a_vanished_daemon_ends_the_harness_with_its_code(tmp_path: Path) -> None:
    session = unique_session()
    async with agentd(2, prompt=False) as (daemon, server_scope):
        harness = start_harness(session, 2, daemon, tmp_path)
        async with cleanup(harness, session):
            await wait_until(lambda: len(daemon.hellos) == 1)
            server_scope.cancel()  # the daemon dies: its connection and socket go away
            code, log, took = await _exit_code(harness)
    assert code == EXIT_DAEMON_GONE, log
    # reconnect_for, counted in fair CPU time (up to STRETCH times it on a loaded host, ADR
    # 0046), then the usual bound
    assert took <= STRETCH * 1.0 + BOUND + 5.0
    assert "unreachable" in log


@pytest.mark.parametrize("missing", ["TETHER_SESSION", "TETHER_AGENTD"])
def test_run_harness_names_a_missing_setting(missing: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TETHER_SESSION": "s",
        "TETHER_EPOCH": "1",
        "TETHER_AGENTD": str(tmp_path / "a.sock"),
        "TETHER_STATE_DIR": str(tmp_path),
    }
    del env[missing]
    done = subprocess.run(
        [sys.executable, "-m", "tether.harness.example"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 64
    assert f"{missing} is not set" in done.stderr
    assert "tether agentd -- python harness.py" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # one line, no traceback


@ASYNCIO_SLOW
async def test_a_second_signal_while_exiting_does_not_change_the_exit(tmp_path: Path) -> None:
    session = unique_session()
    async with agentd(4) as (daemon, _):
        # A stubborn agent makes the exit take one grace, a window for the second signal.
        harness = start_harness(session, 4, daemon, tmp_path, TETHER_EXAMPLE_STUBBORN="1")
        async with cleanup(harness, session):
            await wait_until(lambda: _tool_call_on_disk(tmp_path / f"{session}.jsonl"))
            await wait_until(lambda: count_named(session, "sleep") == 1)
            harness.send_signal(signal.SIGTERM)
            # The call is sealed once SIGTERM is the cause; then the harness waits out the agent.
            transcript = tmp_path / f"{session}.jsonl"
            await wait_until(
                lambda: any(e.get("status") == "interrupted" for e in _entries(transcript))
            )
            harness.send_signal(signal.SIGHUP)
            code, log, _ = await _exit_code(harness)
    assert code == 128 + signal.SIGTERM, log
    assert marked(session) == []


@ASYNCIO_SLOW
async def test_a_daemon_that_only_refuses_ends_the_harness_instead_of_a_loop(
    tmp_path: Path,
) -> None:
    """A daemon that accepts every connection and refuses every hello (``Error``) is no daemon:
    the harness gives up after ``reconnect_for`` seconds without a welcome, as if it were gone."""
    session = unique_session()
    tmp_path.chmod(0o700)
    path = tmp_path / "agentd.sock"
    refusals: list[int] = []

    async def refuse(connection: wire.Connection) -> None:
        await connection.receive()
        refusals.append(1)
        await connection.send(wire.Error("not today"))

    async with trio.open_nursery() as nursery:
        await nursery.start(wire.serve, path, refuse)
        daemon = FakeAgentd(path, 1)
        harness = start_harness(session, 1, daemon, tmp_path)
        async with cleanup(harness, session):
            code, log, took = await _exit_code(harness)
        nursery.cancel_scope.cancel()
    assert code == EXIT_DAEMON_GONE, log
    # As above, a loaded host stretches the budget; the harness's own start and exit need
    # headroom too (8.4 s at load 12).
    assert took <= STRETCH * 1.0 + BOUND + 5.0
    assert "has not welcomed this harness for 1.0s" in log
    assert len(refusals) >= 3  # it did retry, with backoff, before giving up


def test_run_harness_refuses_a_loop_it_does_not_run_on() -> None:
    async def engine(commands: object, ctx: object) -> None:
        raise AssertionError("never started")

    with pytest.raises(ValueError, match="curio"):
        run_harness(engine, backend="curio")  # type: ignore[arg-type]
