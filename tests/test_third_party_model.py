"""Issue 41, row 6: the OpenAI harness against a server tether did not write. ``fakellm``
(PyPI) runs as a real process on a free port, with its own SSE framing, its own rule matching
and tool-call arguments streamed in pieces; ``python -m tether.harness.openai`` runs under a
real agentd against it: a streamed answer is recorded, a tool call's round trip is recorded
(call, result, the model's answer after it), and a server killed mid-stream, then gone, is a
recorded ``model_error`` each time while the same harness answers once it is back.

Skipped when fakellm is not installed (``pip install 'tether[thirdparty]'``); under
``TETHER_REQUIRE_THIRD_PARTY=1`` (CI) a missing fakellm fails instead."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from etcd_cluster import free_ports
from helpers import third_party, unique_session, wait_until
from test_openai_harness import entries, errors, partials, said, turn_done
from tether import Agentd, SqliteEpochStore
from tether.journal import Event, ToolCall, ToolResult

third_party("fakellm", "thirdparty")

HEARTBEAT = 0.2
MODEL = "fakellm-model"
GREETING = "hello from fakellm, streamed word by word"
STORY = " ".join(f"w{i}" for i in range(3000))  # 10 ms a word: 30 s of stream at least
# fakellm's rules, first match wins, each on the text of the whole conversation: a later prompt
# of a session still carries the earlier ones, so the rules for later prompts come first.
RULES = [
    {"name": "back", "when": {"messages_contain": "welcome back"},
     "respond": {"content": "glad to be back"}},
    {"name": "after_tool", "when": {"tool_result_contains": "stdout:\nhi\n"},
     "respond": {"content": "the tool said hi"}},
    {"name": "call", "when": {"messages_contain": "please run echo hi"},
     "respond": {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}}]}},
    {"name": "plain", "when": {"messages_contain": "say something"},
     "respond": {"content": GREETING}},
    {"name": "story", "when": {"messages_contain": "tell a long story"},
     "respond": {"content": STORY}},
]  # fmt: skip


@pytest.fixture
def directory(agentd_dir: Path) -> Path:
    return agentd_dir


class FakeLLM:
    """``fakellm serve`` with ``RULES`` on 127.0.0.1 (a free port, kept across restarts), as a
    process of the test's own; its output goes to ``fakellm.log``."""

    def __init__(self, directory: Path) -> None:
        self.config = directory / "fakellm.yaml"
        self.config.write_text(json.dumps({"version": 1, "rules": RULES}))  # JSON is YAML
        self.log = directory / "fakellm.log"
        (self.port,) = free_ports(1)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def launch(self) -> None:
        """Start it (``ready`` waits until it answers)."""
        # fakellm has no __main__: its console script's own two lines, with this interpreter.
        argv = [sys.executable, "-c", "from fakellm.cli import main; main()", "serve", "--host",
                "127.0.0.1", "--port", str(self.port), "--config", str(self.config)]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip

    async def ready(self) -> None:
        """Wait until it answers: its config loaded, its socket bound (seconds: fastapi)."""
        await wait_until(self.accepts, timeout=60)
        assert (await self.stats())["total_requests"] == 0

    def accepts(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"fakellm exited {self.process.returncode}:\n{self.log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
        except OSError:
            return False
        return True

    async def stats(self) -> dict[str, Any]:
        """fakellm's own record: ``recent`` requests (newest first), each ``matched_rule``."""
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}/_fakellm/stats")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    async def matched(self) -> list[str]:
        """The rule each request matched, oldest first."""
        return [r["matched_rule"] for r in reversed((await self.stats())["recent"])]

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, every open stream cut where it is."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait(timeout=30)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # uvicorn waits for open streams to end
            process.kill()
            process.wait(timeout=30)


@asynccontextmanager
async def serving(directory: Path) -> AsyncIterator[FakeLLM]:
    """fakellm, launched: a test starts its harness while fakellm starts (both take seconds),
    then waits until it is ``ready``."""
    server = FakeLLM(directory)
    try:
        server.launch()
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def running(directory: Path, url: str) -> AsyncIterator[Agentd]:
    argv = [sys.executable, "-m", "tether.harness.openai", "--base-url", url,
            "--model", MODEL, "--system", "you are a test"]  # fmt: skip
    async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
        agentd = Agentd(store, directory / "agentd.sock", argv, heartbeat=HEARTBEAT,
                        grace=0.3, start_timeout=15.0)  # fmt: skip
        async with agentd.running(stop_harnesses=True):
            yield agentd


async def wait_for_rules(server: FakeLLM, count: int, timeout: float = 30) -> list[str]:
    """The rules fakellm's requests matched, once there are ``count`` of them."""
    with trio.fail_after(timeout):
        while len(found := await server.matched()) < count:
            await trio.sleep(0.02)
    return found


async def one_turn(
    directory: Path, server: FakeLLM, agentd: Agentd, session: str, prompt: str
) -> None:
    """Start the session's harness while fakellm starts, then send ``prompt`` and wait for
    its turn to end."""
    await agentd.start_agent(session)
    await server.ready()
    await agentd.deliver(session, prompt)
    await wait_until(lambda: turn_done(directory, session), timeout=30)


async def test_a_streamed_answer_is_recorded(directory: Path) -> None:
    session = unique_session()
    async with serving(directory) as server, running(directory, server.url) as agentd:
        await one_turn(directory, server, agentd, session, "say something")
        (request,) = (await server.stats())["recent"]
    assert (request["matched_rule"], request["stream"], request["model"]) == ("plain", True, MODEL)
    assert said(directory, session, "user") == ["say something"]
    assert said(directory, session) == [GREETING]  # a chunk a word, one message
    assert (errors(directory, session), partials(directory, session)) == ([], [])


async def test_a_tool_call_streamed_in_pieces_round_trips(directory: Path) -> None:
    session = unique_session()
    async with serving(directory) as server, running(directory, server.url) as agentd:
        await one_turn(directory, server, agentd, session, "please run echo hi")
        # The second request carried the tool's result: fakellm's rule on it matched.
        assert await server.matched() == ["call", "after_tool"]
    recorded = entries(directory, session)
    kinds = [type(e).__name__ for e in recorded if not isinstance(e, Event)]
    assert kinds == ["Message", "Message", "ToolCall", "ToolResult", "Message"], kinds
    (call,) = [e for e in recorded if isinstance(e, ToolCall)]
    assert (call.name, call.args) == ("shell", {"argv": ["sh", "-c", "echo hi"]})
    (result,) = [e for e in recorded if isinstance(e, ToolResult)]
    assert (result.call_id, result.status) == (call.id, "ok")
    assert result.output["stdout"] == "hi\n"
    # The reply that made the call had no text; the answer after the result is recorded.
    assert said(directory, session) == ["", "the tool said hi"]
    assert errors(directory, session) == []


@pytest.mark.slow  # two fakellm starts: 5 to 9 s on 2 loaded cores
async def test_a_killed_server_is_a_recorded_error_and_the_harness_lives_on(
    directory: Path,
) -> None:
    """fakellm SIGKILLed mid-stream: ``dropped``; the next prompt while it is down:
    ``unreachable``; restarted on its port, the same harness answers the prompt after."""
    session = unique_session()
    async with serving(directory) as server, running(directory, server.url) as agentd:
        await agentd.start_agent(session)  # while fakellm starts
        await server.ready()
        first = await agentd.deliver(session, "tell a long story")
        await wait_for_rules(server, 1)  # the request is in, its 30 s of stream under way
        server.kill()
        await wait_until(lambda: len(errors(directory, session)) == 1, timeout=30)
        await wait_until(lambda: turn_done(directory, session), timeout=30)
        second = await agentd.deliver(session, "are you still there")
        await wait_until(lambda: len(errors(directory, session)) == 2, timeout=30)
        server.launch()
        await server.ready()
        third = await agentd.deliver(session, "welcome back")
        await wait_until(lambda: "glad to be back" in said(directory, session), timeout=30)
        assert await server.matched() == ["back"]
    assert first.pid == second.pid == third.pid
    dropped, unreachable = errors(directory, session)
    assert (dropped.data["failure"], dropped.data["status"]) == ("dropped", 0)
    assert dropped.data["prompt_id"] == first.prompt_id
    assert (unreachable.data["failure"], unreachable.data["status"]) == ("unreachable", 0)
    assert unreachable.data["prompt_id"] == second.prompt_id
    # What had streamed before the kill (if any reached the harness) is kept apart, cut on a
    # word of the story, and never recorded as the model's answer.
    assert len(partials(directory, session)) <= 1
    for partial in partials(directory, session):
        assert partial.data["prompt_id"] == first.prompt_id
        text = partial.data["text"]
        assert STORY.startswith(text)
        assert text == "" or STORY[len(text) : len(text) + 1] in ("", " ")
    assert said(directory, session) == ["glad to be back"]
    prompts = ["tell a long story", "are you still there", "welcome back"]
    assert said(directory, session, "user") == prompts
