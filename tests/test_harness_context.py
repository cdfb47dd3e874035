"""HarnessContext.tool in process: the call is durable first, then ok, error or aborted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from helpers import unique_session
from tether import ChildGroup, HarnessContext, ToolCall, ToolResult, Transcript, channel
from tether.harness import Command


@asynccontextmanager
async def context(tmp_path: Path) -> AsyncIterator[HarnessContext]:
    tx, _rx = channel(Command, name="commands")
    async with (
        await Transcript.open(tmp_path / "t.jsonl") as transcript,
        ChildGroup(unique_session(), 1, grace=0.2) as children,
    ):
        yield HarnessContext("s", 1, transcript, children, tx.downgrade())
    tx.close()


def _exchange(ctx: HarnessContext) -> tuple[ToolCall, ToolResult]:
    call, result = ctx.transcript.entries[-2:]
    assert isinstance(call, ToolCall)
    assert isinstance(result, ToolResult)
    assert result.call_id == call.id
    return call, result


async def test_a_tool_that_returns_is_recorded_ok_after_its_durable_call(tmp_path: Path) -> None:
    async with context(tmp_path) as ctx:
        seen_dangling: list[int] = []

        async def fn() -> dict[str, int]:
            seen_dangling.append(len(ctx.transcript.dangling()))  # the call is already on disk
            return {"lines": 3}

        assert await ctx.tool("count", {"path": "x"}, fn) == {"lines": 3}
        call, result = _exchange(ctx)
        assert seen_dangling == [1]
        assert (call.name, call.args) == ("count", {"path": "x"})
        assert (result.status, result.output) == ("ok", {"lines": 3})


async def test_a_tool_that_raises_is_recorded_as_an_error_and_re_raised(tmp_path: Path) -> None:
    async with context(tmp_path) as ctx:

        async def fn() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await ctx.tool("explode", {}, fn)
        _, result = _exchange(ctx)
        assert (result.status, result.output) == ("error", "ValueError: boom")


async def test_a_cancelled_tool_is_recorded_aborted_with_the_shutdown_reason(
    tmp_path: Path,
) -> None:
    async with context(tmp_path) as ctx:
        with trio.move_on_after(0.01):
            await ctx.tool("wait", {}, trio.sleep_forever)
        _, result = _exchange(ctx)
        assert (result.status, result.reason) == ("aborted", "cancelled while the tool ran")
        ctx.shutdown_reason = "worker shut down mid-call (SIGTERM from pid 7, kill)"
        with trio.move_on_after(0.01):
            await ctx.tool("wait", {}, trio.sleep_forever)
        _, result = _exchange(ctx)
        assert result.reason == "worker shut down mid-call (SIGTERM from pid 7, kill)"
        assert ctx.transcript.dangling() == []


async def test_output_that_is_not_json_is_recorded_by_repr(tmp_path: Path) -> None:
    async with context(tmp_path) as ctx:

        async def fn() -> object:
            return Path("/tmp")

        await ctx.tool("path", {}, fn)
        _, result = _exchange(ctx)
        assert result.output == repr(Path("/tmp"))


async def test_requeue_is_weak_and_never_keeps_the_commands_open(tmp_path: Path) -> None:
    tx, rx = channel(Command, name="commands")
    async with (
        await Transcript.open(tmp_path / "t.jsonl") as transcript,
        ChildGroup(unique_session(), 1, grace=0.2) as children,
    ):
        ctx = HarnessContext("s", 1, transcript, children, tx.downgrade())
        assert rx.strong_count == 1
        tx.close()
        assert ctx.requeue.upgrade() is None
