"""Issue 34, the engine's parts against the fake server on a real socket: server-sent events
as servers send them (comments, ``event:`` lines, data split over lines, a usage chunk), each
chunk one mark of the stream clock, every failure typed; the conversation rebuilt from a real
transcript; a call the engine cannot run refused with a reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tether import Transcript
from tether.harness.openai import Failure, ModelError
from tether.harness.openai._conversation import messages
from tether.harness.openai._engine import _command
from tether.harness.openai._stream import complete
from tether.liveness import StreamClock
from tether.testing import FakeModel

PAYLOAD = {"model": "fake", "stream": True, "messages": []}


def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **more}


async def ask(*steps: Any) -> tuple[Any, StreamClock]:
    """One request to a fake serving ``steps``: the reply (or the ``ModelError``)."""
    fake = FakeModel([steps])
    clock = StreamClock("fake")
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        async with httpx.AsyncClient() as client:
            try:
                found: Any = await complete(client, f"{fake.url}/chat/completions", PAYLOAD,
                                            {}, clock)  # fmt: skip
            except ModelError as exc:
                found = exc
        nursery.cancel_scope.cancel()
    return found, clock


async def test_events_as_servers_send_them_and_one_mark_per_chunk() -> None:
    split = json.dumps(chunk({"content": " world"})).replace(", ", ",\ndata: ", 1)
    raw = (b": keep-alive\n\nevent: message\nid: 7\ndata: "
           + json.dumps(chunk({"content": "hello"})).encode() + b"\n\n"
           + b"data: " + split.encode() + b"\n\n"
           + b"data: " + json.dumps({"choices": [], "usage": {"total_tokens": 3}}).encode()
           + b"\n\n")  # fmt: skip
    reply, clock = await ask(("raw", raw), ("reasoning", "hm"), ("call", "ls -l"))
    assert reply.content == "hello world"
    assert reply.reasoning == 1
    assert reply.finish_reason == "tool_calls"
    (call,) = reply.calls.values()
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call_fake0", "shell", {"command": "ls -l"},
    )  # fmt: skip
    # the role chunk, 3 raw chunks (not the comment), reasoning, 3 call deltas, the finish
    assert clock.parts == reply.chunks == 9


async def test_a_finished_stream_without_done_is_whole_and_an_unfinished_one_dropped() -> None:
    finished = b"data: " + json.dumps(chunk({"content": "ok"}, "stop")).encode() + b"\n\n"
    reply, _ = await ask(("raw", finished), ("end",))
    assert (reply.content, reply.finish_reason) == ("ok", "stop")
    dropped, _ = await ask(("text", "half"), ("end",))
    assert isinstance(dropped, ModelError)
    assert dropped.failure is Failure.DROPPED


@pytest.mark.parametrize(
    ("steps", "failure", "status"),
    [((("status", 500),), Failure.HTTP, 500), ((("garbage",),), Failure.MALFORMED, 0),
     ((("raw", b'data: {"error": {"message": "overloaded"}}\n\n'),), Failure.MALFORMED, 0),
     ((("raw", b"data: [1, 2]\n\n"),), Failure.MALFORMED, 0),
     ((("text", "half"), ("drop",)), Failure.DROPPED, 0)],
)  # fmt: skip
async def test_each_failure_is_typed(steps: Any, failure: Failure, status: int) -> None:
    found, _ = await ask(*steps)
    assert isinstance(found, ModelError)
    assert (found.failure, found.status) == (failure, status)
    assert found.record()["failure"] == failure.value


async def test_a_server_nobody_listens_on_is_unreachable() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        async with httpx.AsyncClient() as client:
            with pytest.raises(ModelError) as refused:
                await complete(client, f"http://127.0.0.1:{port}/v1/chat/completions",
                               PAYLOAD, {}, StreamClock("fake"))  # fmt: skip
    assert refused.value.failure is Failure.UNREACHABLE


async def test_the_conversation_is_rebuilt_from_the_transcript(tmp_path: Path) -> None:
    async with await Transcript.open(tmp_path / "s.jsonl") as transcript:
        await transcript.append_message("user", "fix it", prompt_id="p1")
        await transcript.append_message("assistant", "looking")
        first = await transcript.tool_call("shell", {"argv": ["sh", "-c", "ls"]})
        second = await transcript.tool_call("shell", {"argv": ["sh", "-c", "make"]})
        await transcript.tool_result(first.id, {"code": 0, "stdout": "a\n", "stderr": ""}, "ok")
        await transcript.event("tool_stalled", {"call": second.id})
        why = "worker shut down mid-call (SIGTERM from pid 7)"
        await transcript.tool_result(second.id, None, "interrupted", reason=why)
        other = await transcript.tool_call("python", {"arguments": "{"})
        await transcript.tool_result(other.id, "ValueError: no tool named 'python'", "error")
        await transcript.append_message("assistant", "done")
        built = messages(transcript.entries, "be brief")
    # Every call after an assistant message is one of its calls, whatever came between.
    assert [m["role"] for m in built] == ["system", "user", "assistant", "tool", "tool", "tool",
                                          "assistant"]  # fmt: skip
    calls = built[2]["tool_calls"]
    assert [c["id"] for c in calls] == [first.id, second.id, other.id]
    assert json.loads(calls[1]["function"]["arguments"]) == {"command": "make"}
    assert built[3] == {"role": "tool", "tool_call_id": first.id,
                        "content": "exit code 0\nstdout:\na\n"}  # fmt: skip
    assert built[4]["content"] == "[interrupted: worker shut down mid-call (SIGTERM from pid 7)]"
    assert calls[2]["function"] == {"name": "python", "arguments": '{"arguments": "{"}'}
    assert built[5]["content"] == "[error]\nValueError: no tool named 'python'"
    assert built[6] == {"role": "assistant", "content": "done"}


async def test_a_failed_or_cut_request_never_leaves_two_user_messages_in_a_row(
    tmp_path: Path,
) -> None:
    """A strict chat template refuses two user messages in a row (found against fakellm): a
    prompt whose request failed gets an assistant message saying so, one whose stream was cut
    gets what arrived, marked cut."""
    async with await Transcript.open(tmp_path / "s.jsonl") as transcript:
        await transcript.append_message("user", "a", prompt_id="p1")
        await transcript.event("model_error", {"prompt_id": "p1", "failure": "http",
                                               "status": 429, "detail": "slow down"})  # fmt: skip
        await transcript.append_message("user", "b", prompt_id="p2")
        await transcript.event("partial_reply", {"prompt_id": "p2", "why": "dropped: gone",
                                                 "text": "half"})  # fmt: skip
        await transcript.event("model_error", {"prompt_id": "p2", "failure": "dropped"})
        await transcript.append_message("user", "c", prompt_id="p3")
        built = messages(transcript.entries, None)
    assert built == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "[no reply: the model request failed (http 429)]"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "half\n[this reply was cut off: dropped: gone]"},
        {"role": "user", "content": "c"},
    ]


def test_a_call_the_engine_cannot_run_is_refused_with_a_reason() -> None:
    assert _command("shell", '{"command": "ls"}') == "ls"
    assert _command("python", "{}") == ["no tool named 'python': the only tool is 'shell'"]
    assert _command("shell", "{not json")[0].startswith("the arguments are not JSON")
    assert _command("shell", '{"cmd": "ls"}')[0].startswith('shell takes {"command": string}')
