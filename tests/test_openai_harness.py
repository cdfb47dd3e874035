"""Issue 34 with real processes: ``python -m tether.harness.openai`` under a real agentd against
the fake OpenAI-compatible server (the real wire format over real sockets). A tool call's round
trip is recorded (call, result, the model's final answer); a stream silent past its threshold
is ``stalled`` while the harness's heartbeat stays fresh, and a slow healthy one never is; a
SIGKILL mid tool call, then a fresh harness resumes the turn and the model's next request
carries the interrupted result; a 429, a dropped stream and a malformed event are recorded
errors, and the harness lives on."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from helpers import unique_session, wait_until
from tether import Agentd, SqliteEpochStore
from tether.harness.openai._fake import FakeModel
from tether.journal import Event, Message, ToolCall, ToolResult, scan

STALL = 1.5
HEARTBEAT = 0.2


@pytest.fixture
def directory(agentd_dir: Path) -> Path:
    return agentd_dir


@asynccontextmanager
async def running(directory: Path, fake: FakeModel, *extra: str) -> AsyncIterator[Agentd]:
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        argv = [sys.executable, "-m", "tether.harness.openai", "--base-url", fake.url,
                "--model", "fake", "--system", "you are a test", *extra]  # fmt: skip
        async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
            agentd = Agentd(store, directory / "agentd.sock", argv, heartbeat=HEARTBEAT,
                            grace=0.3, start_timeout=15.0, stall_after=STALL)  # fmt: skip
            async with agentd.running(stop_harnesses=True):
                yield agentd
        nursery.cancel_scope.cancel()


def entries(directory: Path, session: str) -> list[Any]:
    path = directory / "sessions" / session / f"{session}.jsonl"
    return list(scan(path.read_bytes()).entries) if path.exists() else []


def said(directory: Path, session: str, role: str = "assistant") -> list[str]:
    return [e.content for e in entries(directory, session)
            if isinstance(e, Message) and e.role == role]  # fmt: skip


def row(agentd: Agentd, session: str) -> Any:
    (found,) = [r for r in agentd.status() if r.session == session]
    return found


async def test_a_tool_call_round_trip_is_recorded(directory: Path) -> None:
    fake = FakeModel([[("reasoning", "look first"), ("call", "echo hello from the tool")],
                      [("text", "the tool said hello")]])  # fmt: skip
    session = unique_session()
    async with running(directory, fake) as agentd:
        await agentd.deliver(session, "say hello")
        await wait_until(lambda: "the tool said hello" in said(directory, session), timeout=30)
    kinds = [type(e).__name__ for e in entries(directory, session)]
    assert kinds[:5] == ["Message", "Message", "ToolCall", "ToolResult", "Message"], kinds
    call = next(e for e in entries(directory, session) if isinstance(e, ToolCall))
    assert (call.name, call.args) == ("shell", {"argv": ["sh", "-c", "echo hello from the tool"]})
    result = next(e for e in entries(directory, session) if isinstance(e, ToolResult))
    assert result.status == "ok"
    assert result.output["stdout"] == "hello from the tool\n"
    first, second = fake.requests
    assert first["stream"] is True
    assert first["tools"][0]["function"]["name"] == "shell"
    assert first["messages"] == [{"role": "system", "content": "you are a test"},
                                 {"role": "user", "content": "say hello"}]  # fmt: skip
    assistant, tool = second["messages"][2:4]
    assert assistant["tool_calls"][0]["id"] == call.id
    assert tool == {"role": "tool", "tool_call_id": call.id,
                    "content": "exit code 0\nstdout:\nhello from the tool\n"}  # fmt: skip


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
async def test_a_silent_stream_is_stalled_with_a_fresh_heartbeat_and_a_slow_one_never(
    directory: Path,
) -> None:
    slow = [("text", f"part {i} ") for i in range(1)] + [
        step for i in range(8) for step in (("sleep", 0.5), ("reasoning", f"step {i}"))
    ]
    fake = FakeModel([slow, [("text", "thinking..."), ("stall",)]])
    healthy, silent = unique_session(), unique_session()
    async with running(directory, fake) as agentd:
        await agentd.deliver(healthy, "take your time")
        seen = set()
        with trio.move_on_after(30):
            while "part 0" not in " ".join(said(directory, healthy)):
                seen.add(row(agentd, healthy).state)
                await trio.sleep(HEARTBEAT)
        assert "stalled" not in seen
        assert said(directory, healthy) == ["part 0 "]
        await agentd.deliver(silent, "think hard")
        await wait_until(lambda: row(agentd, silent).state == "stalled", timeout=STALL + 20)
        status = row(agentd, silent)
        assert status.heartbeat_age is not None
        assert status.heartbeat_age < 3 * HEARTBEAT + 1
        assert status.activity == "turn on fake"


async def test_a_sigkill_mid_tool_call_resumes_with_the_interrupted_result(
    directory: Path, orphans_settled: None
) -> None:
    fake = FakeModel([[("call", "sleep 600")], [("text", "I see the call was interrupted")]])
    session = unique_session()
    async with running(directory, fake) as agentd:
        first = await agentd.deliver(session, "run the long job")
        await wait_until(lambda: any(isinstance(e, ToolCall) for e in entries(directory, session)))
        os.kill(first.pid, signal.SIGKILL)
        await wait_until(lambda: row(agentd, session).pid != first.pid, timeout=30)
        again = await agentd.start_agent(session)  # as the next tether start or send would
        assert again.epoch > first.epoch
        await wait_until(lambda: len(fake.requests) >= 2, timeout=30)
        await wait_until(
            lambda: "I see the call was interrupted" in said(directory, session), timeout=30
        )
        await wait_until(lambda: turn_done(directory, session), timeout=30)
    resumed = fake.requests[1]["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
    assert resumed[3]["content"].startswith("[interrupted: ")
    results = [e for e in entries(directory, session) if isinstance(e, ToolResult)]
    assert [r.status for r in results] == ["interrupted"]
    assert said(directory, session, "user") == ["run the long job"]  # never delivered twice
    # A reader sees where the resumed turn begins and ends (issue 41, row 6): one end.
    await_end = [
        (e.kind, e.data["prompt_id"]) if isinstance(e, Event) else ("assistant", e.content)
        for e in entries(directory, session)
        if (isinstance(e, Event) and e.kind.startswith("turn_"))
        or (isinstance(e, Message) and e.role == "assistant" and e.content)
    ]
    assert await_end == [
        ("turn_aborted", first.prompt_id),
        ("turn_resumed", first.prompt_id),
        ("assistant", "I see the call was interrupted"),
        ("turn_done", first.prompt_id),
    ]


FAILURES = {"http": [("status", 429)], "dropped": [("text", "half"), ("drop",)],
            "malformed": [("garbage",)]}  # fmt: skip


async def test_a_failed_request_is_a_recorded_error_and_the_harness_lives_on(
    directory: Path,
) -> None:
    """A 429, a dropped stream and a malformed event, each in a session of its own: one
    ``model_error`` each, and the same harness answers the next prompt."""
    fake = FakeModel()
    sessions = {failure: unique_session() for failure in FAILURES}
    async with running(directory, fake) as agentd:
        for failure, session in sessions.items():
            fake.add(*FAILURES[failure])
            first = await agentd.deliver(session, "one")
            await wait_until(lambda s=session: bool(errors(directory, s)), timeout=30)
            fake.add(("text", f"fine now {failure}"))
            second = await agentd.deliver(session, "two")
            await wait_until(lambda s=session, f=failure: f"fine now {f}" in said(directory, s),
                             timeout=30)  # fmt: skip
            assert second.pid == first.pid
            (error,) = errors(directory, session)
            assert error.data["failure"] == failure
            assert error.data["prompt_id"] == first.prompt_id
            assert error.data["status"] == (429 if failure == "http" else 0)


def turn_done(directory: Path, session: str) -> bool:
    return any(isinstance(e, Event) and e.kind == "turn_done" for e in entries(directory, session))


def errors(directory: Path, session: str) -> list[Event]:
    return [e for e in entries(directory, session)
            if isinstance(e, Event) and e.kind == "model_error"]  # fmt: skip


async def test_stream_timeout_bounds_a_stalled_stream(directory: Path) -> None:
    """Issue 41, row 5: ``--stream-timeout`` (the harness had no flag: 600 s) ends a request
    whose server went silent mid-stream; the failure is recorded and the harness lives on."""
    fake = FakeModel([[("text", "thinking..."), ("stall",)]])
    session = unique_session()
    async with running(directory, fake, "--stream-timeout", "1") as agentd:
        first = await agentd.deliver(session, "one")
        await wait_until(lambda: bool(errors(directory, session)), timeout=60)
        fake.add(("text", "after the stall"))
        second = await agentd.deliver(session, "two")
        await wait_until(lambda: "after the stall" in said(directory, session), timeout=30)
    (error,) = errors(directory, session)
    assert error.data["failure"] == "timeout"
    assert second.pid == first.pid
    (partial,) = partials(directory, session)  # issue 41, row 2: what arrived is kept
    assert partial.data["text"] == "thinking..."
    assert partial.data["prompt_id"] == first.prompt_id
    assert partial.data["chars"] == len("thinking...")
    assert "thinking..." not in said(directory, session)  # not replayed as the model's answer


def partials(directory: Path, session: str) -> list[Event]:
    return [e for e in entries(directory, session)
            if isinstance(e, Event) and e.kind == "partial_reply"]  # fmt: skip


async def test_a_stream_cut_by_sigterm_keeps_the_text_that_arrived(directory: Path) -> None:
    """Issue 41, row 2: none of a cut stream's text was recorded. SIGTERM mid-stream: the
    text is kept in a partial_reply before the turn's seal, which says mid-turn."""
    fake = FakeModel([[("text", "half an "), ("text", "answer"), ("stall",)]])
    session = unique_session()
    async with running(directory, fake) as agentd:
        first = await agentd.deliver(session, "think")
        # Stalled: STALL seconds of silence since its last chunk, so the text has arrived.
        await wait_until(lambda: row(agentd, session).state == "stalled", timeout=STALL + 30)
        os.kill(first.pid, signal.SIGTERM)
        await wait_until(lambda: row(agentd, session).pid != first.pid, timeout=30)
        await agentd.start_agent(session)  # as the next tether start or send would
        await wait_until(lambda: len(fake.requests) >= 2, timeout=30)
        await wait_until(lambda: turn_done(directory, session), timeout=30)  # not cut again
    # The resumed model is told what it had said, and that it was cut (issue 41, row 2).
    cut = {
        "role": "assistant",
        "content": "half an answer\n[this reply was cut off: the turn was cut mid-stream]",
    }
    assert fake.requests[1]["messages"][1:] == [{"role": "user", "content": "think"}, cut]
    kinds = [e.kind for e in entries(directory, session) if isinstance(e, Event)]
    assert kinds.index("partial_reply") < kinds.index("turn_aborted")
    (partial,) = partials(directory, session)
    assert (partial.data["text"], partial.data["chars"]) == ("half an answer", 14)
    assert partial.data["chunks"] >= 2
    (sealed,) = [e for e in entries(directory, session)
                 if isinstance(e, Event) and e.kind == "turn_aborted"]  # fmt: skip
    assert "mid-turn (SIGTERM" in sealed.data["reason"]


async def test_prompts_sent_during_a_turn_never_reach_its_model_request(directory: Path) -> None:
    """Issue 41, row 1, on the real wire: B and C sent while the model answers A; A's request
    carries A alone, B's carries A's answer and B, and each prompt is answered once."""
    fake = FakeModel([
        [("text", "answer "), ("sleep", 1.0), ("text", "A")],
        [("text", "answer B")],
        [("text", "answer C")],
    ])  # fmt: skip
    session = unique_session()
    async with running(directory, fake) as agentd:
        await agentd.deliver(session, "a")  # recorded: A's turn starts
        await agentd.deliver_later(session, "b")
        await agentd.deliver_later(session, "c")
        await wait_until(lambda: "answer C" in said(directory, session), timeout=60)
    users = [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in fake.requests]
    # One prompt more per request (B and C, queued together, may be delivered in either order).
    assert users[0] == ["a"]
    assert len(users) == 3
    assert users[1] == users[2][:2]
    assert (users[1][0], sorted(users[2])) == ("a", ["a", "b", "c"])
    assert said(directory, session) == ["answer A", "answer B", "answer C"]
