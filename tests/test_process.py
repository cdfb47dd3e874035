"""tether.process on real processes: trees, escalation, identity, twins, spawn errors."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import psutil
import pytest

import tether
from helpers import (
    SIGINT_REPORTER,
    TREE,
    count_named,
    marked,
    python,
    unique_session,
    wait_until,
    zombie_children,
)
from loops import both_loops
from tether import ChildGroup, ProcessRef, SpawnError
from tether.process._table import marks

GRACE = 0.2


def _count_sleepers(session: str) -> int:
    return count_named(session, "sleep")


@both_loops
async def test_a_whole_tree_leaves_no_survivor_and_no_zombie(tmp_path: Path) -> None:
    session = unique_session()
    ready = tmp_path / "ready"
    async with ChildGroup(session, 1, grace=GRACE) as group:
        child = await group.spawn(python(TREE, str(ready)), name="tree")
        await wait_until(lambda: ready.exists() and _count_sleepers(session) == 5)
        assert len(group.members()) == 7  # the child, 5 sleepers, the level-2 python
    assert child.returncode is not None
    assert marked(session) == [], "a process carrying the session marker survived"
    assert zombie_children() == []


@both_loops
async def test_sigint_comes_first_and_a_handler_exits_cleanly(tmp_path: Path) -> None:
    said = tmp_path / "said"
    async with ChildGroup(unique_session(), 1, grace=5.0) as group:
        child = await group.spawn(python(SIGINT_REPORTER, str(said), "got SIGINT"))
        await wait_until(Path(f"{said}.ready").exists)
        started = time.monotonic()
    assert time.monotonic() - started < 5.0, "the child waited for SIGTERM"
    assert said.read_text() == "got SIGINT"
    assert child.returncode == 0


@both_loops
async def test_a_child_ignoring_sigint_and_sigterm_is_killed_within_the_bound(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ready"
    code = """
        import signal, sys
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(sys.argv[1], "w").close()
        signal.pause()
    """
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        child = await group.spawn(python(code, str(ready)))
        await wait_until(ready.exists)
        started = time.monotonic()
    elapsed = time.monotonic() - started
    assert child.returncode == -signal.SIGKILL
    assert 2 * GRACE <= elapsed <= 2 * GRACE + 1.0


@both_loops
async def test_a_stopped_child_gets_sigcont_with_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = """
        import signal, sys
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        open(sys.argv[1], "w").close()
        signal.pause()
    """
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        child = await group.spawn(python(code, str(ready)))
        await wait_until(ready.exists)
        os.kill(child.pid, signal.SIGSTOP)
        await wait_until(lambda: child.ref.state() == "T")
    assert child.returncode == -signal.SIGTERM


@both_loops
async def test_cancelling_the_owner_leaves_no_survivor(tmp_path: Path) -> None:
    session = unique_session()
    ready = tmp_path / "ready"
    with anyio.CancelScope() as scope:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            await group.spawn(python(TREE, str(ready)))
            await wait_until(lambda: ready.exists() and _count_sleepers(session) == 5)
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert marked(session) == []
    assert zombie_children() == []


@both_loops
async def test_an_error_in_the_owner_leaves_no_survivor(tmp_path: Path) -> None:
    session = unique_session()
    ready = tmp_path / "ready"

    async def owner() -> None:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            await group.spawn(python(TREE, str(ready)))
            await wait_until(lambda: ready.exists() and _count_sleepers(session) == 5)
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        await owner()
    assert marked(session) == []
    assert zombie_children() == []


@both_loops
async def test_children_carry_the_session_and_epoch_and_a_clean_signal_state(
    tmp_path: Path,
) -> None:
    # Not a Python child: Python ignores SIGPIPE itself at start-up.
    script = 'echo "$TETHER_SESSION $TETHER_EPOCH $(pwd)" > env; exec cat /proc/self/status > st'
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    try:
        async with ChildGroup("mark-s", 42, grace=GRACE) as group:
            child = await group.spawn(["sh", "-c", script], cwd=tmp_path)
            assert await child.wait() == 0
            # Without a cwd, this process's (as subprocess does), though a keeper spawns it.
            here = await group.spawn(["sh", "-c", f"pwd > {tmp_path}/here"])
            assert await here.wait() == 0
            sleeper = await group.spawn(["sleep", "1000"])
            stat = sleeper.ref.stat()
            assert stat is not None
            assert (stat.session, stat.pgrp) == (sleeper.pid, sleeper.pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert (tmp_path / "env").read_text().split() == ["mark-s", "42", str(tmp_path)]
    assert (tmp_path / "here").read_text().strip() == os.getcwd()
    status = (tmp_path / "st").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert int(fields["SigBlk"], 16) == 0, "the child inherited a blocked signal mask"
    assert int(fields["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1)) == 0, "SIGPIPE is ignored"


@both_loops
async def test_a_child_that_must_die_on_sigterm_does_even_if_the_parent_blocks_it(
    tmp_path: Path,
) -> None:
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    try:
        async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
            child = await group.spawn(["sleep", "1000"])
            assert child.send_signal(signal.SIGTERM)
            with anyio.fail_after(5):
                assert await child.wait() == -signal.SIGTERM
            # The pitfall, shown: subprocess keeps the mask, so its child ignores SIGTERM.
            inherited = subprocess.Popen(["sleep", "1000"])
            try:
                status = Path(f"/proc/{inherited.pid}/status").read_text()
                sigblk = int(status.split("SigBlk:")[1].split()[0], 16)
                assert sigblk & (1 << (signal.SIGTERM - 1))
            finally:
                inherited.kill()
                inherited.wait()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@both_loops
async def test_child_stop_wait_and_concurrent_waiters() -> None:
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        child = await group.spawn(["sleep", "1000"])
        codes: list[int] = []
        async with anyio.create_task_group() as nursery:
            for _ in range(3):

                async def waiter() -> None:
                    codes.append(await child.wait())

                nursery.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert await child.stop() == -signal.SIGINT
        assert codes == [-signal.SIGINT] * 3
        assert child.poll() == -signal.SIGINT
        assert not child.send_signal(signal.SIGTERM)
        assert "exited -2" in repr(child)


@both_loops
async def test_cancelled_wait_leaves_the_child_waitable() -> None:
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        child = await group.spawn(["sleep", "1000"])
        with anyio.move_on_after(0.05):
            await child.wait()
        assert child.returncode is None
        child.send_signal(signal.SIGKILL)
        with anyio.fail_after(5):
            assert await child.wait() == -signal.SIGKILL


def test_a_reused_pid_is_never_signalled() -> None:
    victim = subprocess.Popen(["sleep", "1000"])
    try:
        real = ProcessRef.of(victim.pid)
        for stale in (
            ProcessRef(victim.pid, real.create_time - 100.0),  # psutil's identity
            ProcessRef(victim.pid, real.create_time - 100.0, 1),  # /proc start ticks
        ):
            assert stale.state() is None
            assert not stale.is_alive()
            assert stale.send_signal(signal.SIGKILL) is False
        assert victim.poll() is None, "a stale ref signalled the process that reused its pid"
        assert real.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=5) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()


@both_loops
async def test_twins_get_sigint_and_are_gone_before_the_new_child_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = unique_session()
    said = tmp_path / "said"
    env = dict(os.environ, TETHER_SESSION=session, TETHER_EPOCH="6")
    twin = subprocess.Popen(python(SIGINT_REPORTER, str(said), "twin got SIGINT"), env=env)
    try:
        await wait_until(Path(f"{said}.ready").exists)
        assert [ref.pid for ref in tether.find_twins(session, exclude_epoch=7)] == [twin.pid]
        assert tether.find_twins(session, exclude_epoch=6) == []
        caplog.set_level(logging.INFO, logger="tether.process")
        async with ChildGroup(session, 7, grace=GRACE) as group:
            await group.spawn(["sleep", "1000"], replace_twins=True)
            assert not psutil.pid_exists(twin.pid), "the twin outlived the new child's start"
            assert said.read_text() == "twin got SIGINT"
            assert tether.find_twins(session, exclude_epoch=7) == []
        assert f"replacing twin of session {session}: pid={twin.pid}" in caplog.text
    finally:
        twin.kill()
        twin.wait()


def test_twins_are_looked_for_on_one_host_only() -> None:
    """Daemons acting as hosts a and b on one machine: each host's twins are its own."""
    session = unique_session()
    procs = {
        host: subprocess.Popen(
            ["sleep", "1000"],
            env=dict(os.environ, TETHER_SESSION=session, TETHER_EPOCH="1", TETHER_HOST=host),
        )
        for host in ("a", "b")
    }
    try:
        for host, proc in procs.items():
            assert [ref.pid for ref in tether.find_twins(session, host=host)] == [proc.pid]
        assert tether.find_twins(session) == [], "this process has no host mark"
        assert tether.find_twins(session, host=None) == []
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_a_twin_is_found_the_moment_its_spawn_returns() -> None:
    """``Popen`` returns before the kernel lays out the child's environment (about a third of
    spawns here read it empty at first); the scan waits for it instead of missing the twin.

    ``find_twins`` reads every other process first, which mostly hides the window, so the
    per-process read it uses is asserted directly as well.
    """
    session = unique_session()
    env = dict(os.environ, TETHER_SESSION=session, TETHER_EPOCH="1")
    for _ in range(40):
        proc = subprocess.Popen(["sleep", "1000"], env=env)
        try:
            mark = marks(proc.pid)
            assert mark is not None
            assert mark.session == session
            assert [ref.pid for ref in tether.find_twins(session, host=None)] == [proc.pid]
        finally:
            proc.kill()
            proc.wait()


@both_loops
async def test_a_program_found_on_path_before_is_looked_up_again_once_it_is_gone(
    tmp_path: Path,
) -> None:
    """PATH lookups are remembered (as a shell's hash table), never past the program."""
    tool = tmp_path / "tether-test-tool"
    tool.write_text("#!/bin/sh\nexit 7\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        assert await (await group.spawn([tool.name], env=env)).wait() == 7
        tool.unlink()
        with pytest.raises(SpawnError) as gone:
            await group.spawn([tool.name], env=env)
        assert gone.value.errno == errno.ENOENT


@both_loops
async def test_spawn_errors_name_the_program_and_errno(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    before = {child.pid for child in psutil.Process().children()}
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        keeper = group.keeper_pid
        with pytest.raises(SpawnError, match="no-such-program-xyz") as missing:
            await group.spawn(["no-such-program-xyz"])
        assert missing.value.errno == errno.ENOENT
        assert missing.value.program == "no-such-program-xyz"
        # As OSError maps them (subprocess raises these): caught as such, named SpawnError.
        assert isinstance(missing.value, FileNotFoundError)
        assert repr(missing.value).startswith("SpawnError(2, ")
        with pytest.raises(SpawnError) as denied:
            await group.spawn([str(script)])
        assert denied.value.errno == errno.EACCES
        assert isinstance(denied.value, PermissionError)
        with pytest.raises(SpawnError, match="working directory"):
            await group.spawn(["true"], cwd=tmp_path / "missing")
        with pytest.raises(ValueError, match="argv"):
            await group.spawn([])
        assert group.children == ()
    assert {child.pid for child in psutil.Process().children()} - before <= {keeper}


@both_loops
async def test_spawn_needs_an_open_group() -> None:
    group = ChildGroup(unique_session(), 1)
    with pytest.raises(RuntimeError, match="spawn inside"):
        await group.spawn(["true"])
    async with group:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        await group.spawn(["true"])
    with pytest.raises(RuntimeError, match="once"):
        async with group:
            pass
    with pytest.raises(ValueError, match="grace"):
        ChildGroup("s", 1, grace=-1)
    with pytest.raises(ValueError, match="reap_interval"):
        ChildGroup("s", 1, reap_interval=0)


@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "fallback"])
@both_loops
async def test_an_escaped_orphan_that_exits_early_is_reaped_while_the_group_lives(
    tmp_path: Path, keeper: bool
) -> None:
    session = unique_session()
    ready = tmp_path / "ready"
    code = """
        import os, signal, sys
        if os.fork() == 0:              # a daemon that leaves our session and exits soon
            os.setsid()
            if os.fork() == 0:
                open(sys.argv[1] + ".daemon", "w").write(str(os.getpid()))
                signal.alarm(1)         # the daemon's short life: SIGALRM ends it in 1 s
                signal.pause()
            os._exit(0)
        os.wait()
        open(sys.argv[1], "w").close()
        signal.pause()
    """
    async with ChildGroup(session, 1, grace=GRACE, reap_interval=0.05, keeper=keeper) as group:
        await group.spawn(python(code, str(ready)))
        written = Path(f"{ready}.daemon")
        # The content, not the file: it exists a moment before its pid is written.
        await wait_until(lambda: ready.exists() and written.exists() and written.read_text())
        daemon = int(written.read_text())
        # the keeper is the nearest subreaper; without one, this process is
        adopter = group.keeper_pid if keeper else os.getpid()
        assert adopter is not None
        await wait_until(lambda: psutil.Process(daemon).ppid() == adopter)
        await wait_until(lambda: not psutil.pid_exists(daemon))
        assert zombie_children() == []


@both_loops
async def test_other_code_s_children_in_the_owner_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owner itself carries the session's mark (agentd set it), and so do the children
    other libraries start in it; the group neither signals nor reaps them."""
    session = unique_session()
    monkeypatch.setenv("TETHER_SESSION", session)
    monkeypatch.setenv("TETHER_EPOCH", "1")
    other = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        async with ChildGroup(session, 1, grace=GRACE, reap_interval=0.01, keeper=False) as group:
            await group.spawn(["sleep", "1000"])
            await wait_until(lambda: any(p.pid == other.pid for p in marked(session)))
            assert other.pid not in {ref.pid for ref in group.members()}
            other.send_signal(signal.SIGUSR1)  # dies; the reaper must leave its status to us
            await wait_until(lambda: psutil.Process(other.pid).status() == "zombie")
            for _ in range(3):  # reaper passes, run here rather than waited for
                group._reaper.reap_once()
        assert other.wait(timeout=5) == -signal.SIGUSR1
    finally:
        other.kill()
        other.wait()


@both_loops
async def test_closing_the_group_from_another_task_does_not_cancel_its_owner() -> None:
    reached = False
    async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
        child = await group.spawn(["sleep", "1000"])
        async with anyio.create_task_group() as nursery:
            nursery.start_soon(group.aclose)
        await anyio.lowlevel.checkpoint()
        reached = True
    assert reached, "aclose() from another task cancelled the body of `async with ChildGroup`"
    assert child.returncode == -signal.SIGINT
