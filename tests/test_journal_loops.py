"""Transcripts on both loops (issue 44): the same ``Transcript`` under ``trio.run`` and under
``asyncio.run`` themselves, with the same assertions, on each append path (the kernel's AIO
and the worker thread). A writer SIGKILLed mid-append, on each loop, is in ``test_journal.py``
(its suite runs on both)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import trio

from loops import LOOPS, run_on
from tether import ToolCall, ToolResult, Transcript


@pytest.fixture(params=["kernel", "thread"])
def sync_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Appends synced by the kernel's AIO, then on the worker thread."""
    monkeypatch.setenv("TETHER_AIO", "1" if request.param == "kernel" else "0")
    return str(request.param)


def lines(path: Path) -> list[dict[str, object]]:
    """The file as any JSONL reader reads it: every line whole JSON, or a torn last one."""
    data = path.read_bytes()
    assert b"\0" not in data
    found = []
    *whole, last = data.split(b"\n")
    for line in whole:
        found.append(json.loads(line))
    if last:
        with pytest.raises(json.JSONDecodeError):  # torn: never whole JSON without its "\n"
            json.loads(last)
    return found


@pytest.mark.parametrize("loop", LOOPS)
def test_resume_seals_every_dangling_call(tmp_path: Path, loop: str, sync_path: str) -> None:
    """Three calls left unanswered; a resume seals each with its reason, and only appends."""
    path = tmp_path / "t.jsonl"
    calls: list[ToolCall] = []
    sealed: list[ToolResult] = []

    async def main() -> None:
        async with await Transcript.open(path) as tr:
            calls.extend([await tr.tool_call("tool", {"i": i}) for i in range(3)])
        before = path.read_bytes()
        async with await Transcript.open(path, resume=True, reason="SIGTERM from pid 42") as tr:
            sealed.extend(e for e in tr.entries if isinstance(e, ToolResult))
            assert tr.dangling() == []
        assert path.read_bytes().startswith(before)

    run_on(loop, main)
    assert [r.call_id for r in sealed] == [c.id for c in calls]
    assert {(r.status, r.reason) for r in sealed} == {("interrupted", "SIGTERM from pid 42")}


@pytest.mark.parametrize("loop", LOOPS)
def test_cancelled_appenders_never_lose_an_acknowledged_call(
    tmp_path: Path, loop: str, sync_path: str
) -> None:
    """Eight tasks append concurrently (group-committed) and are cancelled part way, by a
    trio cancel scope or asyncio's native ``task.cancel()``: every call that returned is in
    the file once, in order, and the file is whole JSON lines."""
    path = tmp_path / "t.jsonl"
    returned: list[str] = []

    async def appender(tr: Transcript, n: int) -> None:
        for i in range(1000):
            call = await tr.tool_call("tool", {"task": n, "i": i})
            returned.append(call.id)

    async def main() -> None:
        async with await Transcript.open(path) as tr:
            if loop == "trio":
                async with trio.open_nursery() as nursery:
                    for n in range(8):
                        nursery.start_soon(appender, tr, n)
                    while len(returned) < 200:
                        await trio.sleep(0.001)
                    nursery.cancel_scope.cancel()
            else:
                tasks = [asyncio.ensure_future(appender(tr, n)) for n in range(8)]
                while len(returned) < 200:
                    await asyncio.sleep(0.001)
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with pytest.raises(asyncio.CancelledError):
                        await task
            await tr.tool_call("after", {})  # the transcript still works

    run_on(loop, main)
    on_disk = [str(line["id"]) for line in lines(path) if line.get("name") == "tool"]
    assert len(on_disk) == len(set(on_disk))
    assert set(returned) <= set(on_disk)
    assert lines(path)[-1]["name"] == "after"
