"""``ChildGroup.spawn`` with pipes and ``ChildGroup.run`` (issue 18): a tool's output whole, its
pipes' holders named and stopped, timeouts and stalls bounded and announced. Real processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import psutil
import pytest

from helpers import python, unique_session, wait_until
from loops import both_loops, both_loops_asyncio_slow
from tether import ChildGroup, ManualClock, ToolActivity, ToolFailed, ToolStall
from tether.process import _capture

GRACE = 0.3
LINGER = 0.3
HEADROOM = 3.0  # a loaded 2-core machine; the tight figures are in benchmarks/tools.py


@asynccontextmanager
async def group(keeper: bool = True) -> AsyncIterator[ChildGroup]:
    async with ChildGroup(unique_session(), 1, grace=GRACE, keeper=keeper) as children:
        yield children


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- pipes on spawn ------------------------------------------------------------------------------


@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "no-keeper"])
@both_loops
async def test_spawn_with_pipes_gives_streams(keeper: bool) -> None:
    async with group(keeper) as children:
        child = await children.spawn(
            ["sh", "-c", "cat; echo err >&2"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stderr is not None
        await child.stdin.send_all(b"hello\n")
        await child.stdin.aclose()
        out = await child.stdout.receive_some(100)
        err = await child.stderr.receive_some(100)
        assert (out, err) == (b"hello\n", b"err\n")
        assert await child.wait() == 0


@both_loops
async def test_stderr_to_stdout_devnull_and_a_descriptor(tmp_path: Path) -> None:
    async with group() as children:
        merged = await children.spawn(
            ["sh", "-c", "echo out; echo err >&2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert merged.stdout is not None
        assert merged.stderr is None
        data = b""
        while chunk := await merged.stdout.receive_some(100):
            data += chunk
        assert sorted(data.split()) == [b"err", b"out"]
        fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            to_file = await children.spawn(
                ["sh", "-c", "cat; echo to-file"], stdin=subprocess.DEVNULL, stdout=fd
            )
            assert await to_file.wait() == 0
        finally:
            os.close(fd)
        assert (tmp_path / "out").read_bytes() == b"to-file\n"
        with pytest.raises(ValueError, match="stderr only"):
            await children.spawn(["true"], stdout=subprocess.STDOUT)


# -- run -----------------------------------------------------------------------------------------


@both_loops
async def test_run_returns_the_code_and_both_streams() -> None:
    async with group() as children:
        result = await children.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert not (result.timed_out)
    assert not (result.stalled)
    assert not (result.holders)
    assert result.failed


@both_loops
async def test_ten_mib_out_and_in_are_whole() -> None:
    size = 10 * 1024 * 1024
    async with group() as children:
        out = await children.run(["head", "-c", str(size), "/dev/zero"])
        assert len(out.stdout) == size
        assert out.returncode == 0
        data = os.urandom(1024) * 10240
        back = await children.run(["cat"], input=data)
        assert back.stdout == data


@pytest.mark.parametrize(
    ("script", "stream"),
    [
        ("setsid sleep 600 & echo done", "stdout"),
        ("setsid sleep 600 >/dev/null & echo done >&2", "stderr"),
        ("nohup sleep 600 2>/dev/null & echo done", "stdout"),
    ],
    ids=["setsid", "stderr-only", "nohup"],
)
@both_loops
async def test_a_grandchild_holding_the_pipes_is_named_and_stopped(
    script: str, stream: str
) -> None:
    """The bash tool that exited while its background job keeps stdout open: the run returns
    what was written within ``linger + 2 x grace + 1 s``, names the holder and stops it."""
    async with group() as children:
        started = time.monotonic()
        result = await children.run(["bash", "-c", script], linger=LINGER)
        took = time.monotonic() - started
        assert result.returncode == 0
        assert getattr(result, stream) == b"done\n"
        assert took < LINGER + 2 * GRACE + 1 + HEADROOM
        (holder,) = result.holders
        assert (holder.stream, holder.cmdline) == (stream, "sleep 600")
        assert not alive(holder.pid)


LIST_FDS = """
import os
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.fstat(int(name))  # not the listing's own descriptor, closed by now
    except OSError:
        continue
    fds.append(int(name))
print(sorted(fds))
"""


@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "no-keeper"])
@both_loops
async def test_a_tool_gets_its_stdio_and_what_is_passed_only(keeper: bool) -> None:
    """Issue 29: descriptors this process left inheritable (a library's, an inherited one) are
    not the tool's, nor are duplicates of its pipes; ``pass_fds`` passes some, as in
    ``subprocess``."""
    read, write = os.pipe()
    os.set_inheritable(read, True)
    os.set_inheritable(write, True)
    try:
        async with group(keeper) as children:
            plain = await children.run([sys.executable, "-c", LIST_FDS])
            passed = await children.run([sys.executable, "-c", LIST_FDS], pass_fds=[write])
            with pytest.raises(ValueError, match="above 2"):
                await children.run(["true"], pass_fds=[1])
    finally:
        os.close(read)
        os.close(write)
    assert plain.stdout == b"[0, 1, 2]\n"
    assert passed.stdout == f"[0, 1, 2, {write}]\n".encode()


@both_loops
async def test_a_grandchild_with_its_stdio_elsewhere_holds_nothing() -> None:
    """Issue 29: a background job whose stdio all goes to ``/dev/null`` does not hold the
    tool's pipes (it held duplicates of them, and was named a holder and stopped)."""
    async with group() as children:
        result = await children.run(
            ["sh", "-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo $!"], linger=LINGER
        )
        job = int(result.stdout)
        try:
            assert not result.holders
            assert alive(job)
        finally:
            os.kill(job, 9)


@both_loops_asyncio_slow
async def test_a_timeout_stops_a_tree_that_ignores_sigint_and_sigterm() -> None:
    stubborn = """
        import signal, subprocess, time
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        subprocess.Popen(["sleep", "600"])  # inherits the ignored signals
        time.sleep(600)
    """
    async with group() as children:
        started = time.monotonic()
        result = await children.run(python(stubborn), timeout=1.0)
        took = time.monotonic() - started
        assert result.timed_out
        assert not result.stalled
        assert result.returncode == -9
        assert took < 1.0 + 2 * GRACE + 1 + HEADROOM
        assert "timed out after 1 s" in result.reason()


@both_loops_asyncio_slow
async def test_a_stalled_sleep_is_announced_with_what_it_waits_on_and_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.process")
    seen: list[ToolStall] = []

    async def stalled(stall: ToolStall) -> None:
        seen.append(stall)

    async with group() as children:
        started = time.monotonic()
        result = await children.run(
            ["sh", "-c", "sleep 600 | cat"], stall_after=1.0, stalled=stalled
        )
        took = time.monotonic() - started
    assert result.stalled
    assert not result.timed_out
    assert result.returncode is not None
    assert result.returncode < 0
    assert 1.0 <= took < 1.0 + 2 * GRACE + 1 + HEADROOM
    (stall,) = seen
    text = "\n".join(stall.waits)
    assert "wchan=" in text
    assert "state=S" in text
    assert "cmd=sleep 600" in text
    assert "in read(fd 0: pipe:[" in text  # cat, blocked reading the sleep's pipe
    assert "stalled: " in caplog.text
    assert "threshold 1s" in caplog.text


@both_loops_asyncio_slow
async def test_a_busy_loop_is_never_stalled_only_timed_out() -> None:
    async with group() as children:
        result = await children.run(
            [sys.executable, "-c", "while True: pass"], stall_after=1.5, timeout=5.0
        )
    assert result.timed_out
    assert not result.stalled


@both_loops_asyncio_slow
async def test_a_slow_spawn_is_not_the_tool_s_silence() -> None:
    """Issue 40, a fresh torture seed: a spawn held up 1.5 s (its keeper SIGSTOPped; a loaded
    host does the same) made a tool stalled the moment it started, and it was SIGINTed."""
    activity = ToolActivity()  # made at the call, as a harness does, before the spawn
    async with group() as children:
        await children.run(["true"])  # the keeper runs now
        keeper = children.keeper_pid
        assert keeper is not None
        os.kill(keeper, signal.SIGSTOP)
        try:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(_continue_after, keeper, 1.5)
                result = await children.run(["sleep", "0.3"], stall_after=1.0, activity=activity)
        finally:
            os.kill(keeper, signal.SIGCONT)
    assert (result.returncode, result.stalled) == (0, False)


async def _continue_after(pid: int, seconds: float) -> None:
    await anyio.sleep(seconds)  # the fault's length
    os.kill(pid, signal.SIGCONT)


@both_loops_asyncio_slow
async def test_a_tool_that_keeps_printing_is_never_stalled() -> None:
    printer = "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(0.5)"
    async with group() as children:
        result = await children.run([sys.executable, "-c", printer], stall_after=1.5)
    assert not result.stalled
    assert result.returncode == 0
    assert result.stdout.split() == [str(i).encode() for i in range(8)]
    # About 0.5 s between prints; a starved 2-core host stretched one gap to 1.52 s (3.13's
    # suite in two workers) while the tool was, rightly, never stalled.
    assert result.max_silence < 3.0


@both_loops_asyncio_slow
async def test_host_sleep_is_not_silence() -> None:
    """An injected clock: the host sleeps an hour (awake time does not move) and the tool is
    not stalled; awake time past the threshold stalls it."""
    clock = ManualClock()
    activity = ToolActivity(clock)
    async with group() as children, anyio.create_task_group() as nursery:
        results = []

        async def run() -> None:
            results.append(await children.run(["sleep", "600"], stall_after=5.0, activity=activity))

        nursery.start_soon(run)
        await wait_until(lambda: len(children.children) == 1)
        clock.suspend(3600.0)
        await anyio.sleep(1.0)  # two polls' worth of real time: nothing may happen
        assert not results
        clock.advance(5.5)
        with anyio.fail_after(10):
            while not results:
                await anyio.sleep(0.01)
    (result,) = results
    assert result.stalled
    assert result.max_silence == pytest.approx(5.5)


@both_loops_asyncio_slow
async def test_announce_keeps_waiting_and_check_raises_with_the_result() -> None:
    async with group() as children:
        result = await children.run(
            ["sh", "-c", "sleep 1.5; echo late"], stall_after=0.5, on_stall="announce"
        )
        assert result.stalled
        assert result.stdout == b"late\n"
        assert result.returncode == 0
        with pytest.raises(ToolFailed) as failed:
            await children.run(["sh", "-c", "exit 4"], check=True)
        assert failed.value.result.returncode == 4


@both_loops
async def test_cancelling_a_run_stops_the_tool_s_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    async with group() as children:
        with anyio.move_on_after(0.5):
            await children.run(["sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"])
        pid = int(pidfile.read_text())
        assert not alive(pid)


@both_loops_asyncio_slow
async def test_endless_output_is_kept_up_to_max_output_and_the_rest_counted() -> None:
    """``yes`` always advances, so only its timeout ends it; it must not take our memory."""
    async with group() as children:
        result = await children.run(["yes"], timeout=1.0, max_output=1024 * 1024)
    assert result.timed_out
    assert len(result.stdout) == 1024 * 1024
    assert result.dropped > 0


@both_loops
async def test_output_past_the_spill_size_waits_on_disk_and_comes_back_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 29: past ``SPILL_AT`` a stream goes to an unlinked temporary file (in ``TMPDIR``)
    and is read back whole, byte for byte, both streams at once; the cap still holds; and
    nothing is left in ``TMPDIR`` afterwards."""
    monkeypatch.setattr(_capture, "SPILL_AT", 64 * 1024)
    monkeypatch.setattr(_capture, "WRITE_EVERY", 16 * 1024)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    source = tmp_path / "source"
    source.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    script = f"cat {source}; cat {source} >&2"
    async with group() as children:
        whole = await children.run(["sh", "-c", script])
        capped = await children.run(["sh", "-c", script], max_output=1024 * 1024)
    data = source.read_bytes()
    assert (whole.stdout, whole.stderr, whole.dropped) == (data, data, 0)
    assert (capped.stdout, capped.stderr) == (data[: 1024 * 1024], data[: 1024 * 1024])
    assert capped.dropped == 2 * (len(data) - 1024 * 1024)
    assert os.listdir(tmp_path) == ["source"]


def test_a_tool_s_reported_silence_is_the_one_its_last_look_saw() -> None:
    """Found loaded: a busy tool was called stalled because its harness, starved, had not
    looked at the tool's tree since before the starvation, and reported the gap as the tool's
    silence. What is reported now is the silence up to the last look (or, for a Python tool,
    which says when it advances, up to now)."""
    clock = ManualClock()
    activity = ToolActivity(clock)
    activity.begin()
    changes = [True, False]
    activity.look = lambda: changes.pop(0)
    clock.advance(0.5)
    activity.look_now()  # it burned CPU: an advance
    clock.advance(2.0)  # the harness was starved: no look for 2 s
    assert activity.silence() == pytest.approx(2.0)
    assert activity.observed_silence() == 0.0
    activity.look_now()  # the tree did not change: 2 s of silence seen
    clock.advance(0.3)
    assert activity.observed_silence() == pytest.approx(2.0)
    python_tool = ToolActivity(clock)
    clock.advance(1.0)
    assert python_tool.observed_silence() == pytest.approx(1.0)
