"""``HarnessContext.run_tool``, ``tool(timeout=)`` and ``progress`` (issue 18): every tool call
durable first and answered after, a stall's reason naming its threshold and where it came from,
the ledger's evidence used, and a SIGTERM mid ``run_tool`` sealed naming the sender."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from helpers import harness_env, lingering_killer, marked, unique_session, wait_until
from test_harness import GRACE, _entries, _exit_code, agentd, cleanup
from tether import ChildGroup, HarnessContext, Ledger, ToolCall, ToolResult, Transcript, channel
from tether.harness import Command
from tether.journal import Event


@asynccontextmanager
async def context(tmp_path: Path, ledger: Ledger | None = None) -> AsyncIterator[HarnessContext]:
    tx, _rx = channel(Command, name="commands")
    async with (
        await Transcript.open(tmp_path / "t.jsonl") as transcript,
        ChildGroup(unique_session(), 1, grace=0.2) as children,
    ):
        yield HarnessContext("s", 1, transcript, children, tx.downgrade(), ledger=ledger)
    tx.close()


def exchange(ctx: HarnessContext) -> tuple[ToolCall, ToolResult]:
    entries = [e for e in ctx.transcript.entries if isinstance(e, ToolCall | ToolResult)]
    call, result = entries[-2:]
    assert isinstance(call, ToolCall)
    assert isinstance(result, ToolResult)
    assert result.call_id == call.id
    return call, result


async def test_run_tool_records_the_call_first_and_the_code_and_output_after(
    tmp_path: Path,
) -> None:
    async with context(tmp_path) as ctx:
        result = await ctx.run_tool("bash", ["sh", "-c", "echo hi; echo oops >&2; exit 2"])
        call, answer = exchange(ctx)
    assert result.returncode == 2
    assert (call.name, call.args) == (
        "bash",
        {"argv": ["sh", "-c", "echo hi; echo oops >&2; exit 2"]},
    )
    assert answer.status == "ok"
    assert answer.output == {"code": 2, "stdout": "hi\n", "stderr": "oops\n"}


async def test_a_large_output_is_cut_in_the_transcript_and_kept_whole_beside_it(
    tmp_path: Path,
) -> None:
    async with context(tmp_path) as ctx:
        await ctx.run_tool("dump", ["head", "-c", "200000", "/dev/zero"])
        _, answer = exchange(ctx)
    assert isinstance(answer.output, dict)
    assert len(answer.output["stdout"]) == 64 * 1024
    cut = answer.output["stdout_truncated"]
    assert (cut["bytes"], cut["limit"]) == (200000, 64 * 1024)
    assert Path(cut["file"]).read_bytes() == b"\0" * 200000
    assert Path(cut["file"]).parent == tmp_path / "t.outputs"


async def test_a_stall_is_aborted_naming_the_threshold_and_an_event_says_what_waited(
    tmp_path: Path,
) -> None:
    async with context(tmp_path) as ctx:
        result = await ctx.run_tool("wait", ["sleep", "600"], stall_after=1.0)
        _, answer = exchange(ctx)
        events = [e for e in ctx.transcript.entries if isinstance(e, Event)]
    assert result.stalled
    assert answer.status == "aborted"
    assert answer.reason is not None
    assert re.fullmatch(
        r"stalled after \d+ s without progress \(threshold 1 s from given\)", answer.reason
    ), answer.reason
    (event,) = [e for e in events if e.kind == "tool_stalled"]
    assert event.data["call"] == answer.call_id
    assert event.data["source"] == "given"
    assert any("cmd=sleep 600" in line for line in event.data["waits"])


async def test_the_threshold_comes_from_the_ledger_s_healthy_runs(tmp_path: Path) -> None:
    async with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        for _ in range(25):
            await ledger.record_tool("probe", 0.4, "ok")
        await ledger.record_tool("probe", 50.0, "stalled")  # never raises the threshold
        threshold = await ledger.tool_threshold("probe")
        assert threshold.source == "quantile"
        assert threshold.seconds == pytest.approx(0.6)
        assert (await ledger.tool_threshold("unknown")).seconds == 300.0
        async with context(tmp_path, ledger) as ctx:
            result = await ctx.run_tool("probe", ["sleep", "600"])
            _, answer = exchange(ctx)
        assert result.stalled
        assert result.stall_after == pytest.approx(0.6)
        assert answer.reason is not None
        assert "from quantile" in answer.reason
        after = await ledger.tool_threshold("probe")
        assert after.seconds == pytest.approx(0.6)  # the stalled run is not evidence


async def test_a_python_tool_times_out_aborted_and_marks_its_progress(tmp_path: Path) -> None:
    async with context(tmp_path) as ctx:
        silences: list[float] = []

        async def slow() -> None:
            await trio.sleep(0.3)
            ctx.progress("halfway")
            (tool,) = ctx.tools.open.values()
            silences.append(tool.silence())
            assert tool.activity.note == "halfway"
            await trio.sleep(10)

        with pytest.raises(trio.TooSlowError):
            await ctx.tool("slow", {}, slow, timeout=0.6)
        _, answer = exchange(ctx)
        assert ctx.tools.open == {}
    assert (answer.status, answer.reason) == ("aborted", "timed out after 0.6 s")
    assert silences
    assert silences[0] < 0.1


async def test_an_unstartable_program_is_an_error(tmp_path: Path) -> None:
    async with context(tmp_path) as ctx:
        with pytest.raises(OSError, match="cannot execute"):
            await ctx.run_tool("missing", ["/no/such/tool"])
        _, answer = exchange(ctx)
    assert answer.status == "error"


ENGINE = """
    import sys, tether
    from tether.wire import Prompt
    async def engine(commands, ctx):
        async for command in commands:
            if isinstance(command, Prompt):
                await ctx.run_tool("bash", ["sh", "-c", "setsid sleep 600 & sleep 600"])
    raise SystemExit(tether.run_harness(engine))
"""


async def test_sigterm_mid_run_tool_seals_it_aborted_naming_the_sender(tmp_path: Path) -> None:
    session = unique_session()
    transcript = tmp_path / f"{session}.jsonl"
    async with agentd(3) as (daemon, _):
        harness = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(ENGINE)],
            env=harness_env(session, 3, daemon.path, tmp_path, TETHER_GRACE=str(GRACE)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        async with cleanup(harness, session):
            await wait_until(lambda: len(marked(session)) >= 4)  # keeper, sh, both sleeps
            killer = lingering_killer("TERM", harness.pid)
            try:
                code, log, _ = await _exit_code(harness)
            finally:
                killer.communicate("\n", timeout=10)
    assert code == 128 + signal.SIGTERM, log
    call, result = [e for e in _entries(transcript) if e["type"] in ("tool_call", "tool_result")]
    assert (call["name"], result["status"]) == ("bash", "interrupted")
    assert f"SIGTERM from pid {killer.pid}" in str(result["reason"])
    assert marked(session) == [], "the tool's tree survived"
