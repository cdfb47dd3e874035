"""tether.process for supervisors: ``start`` (no group owns the child), ``stop_trees``, ``reap``,
``reap_orphans`` and ``find_twins(epoch=)``, on real processes."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import anyio
import pytest

import tether.process._start
from helpers import python, unique_session, wait_until, zombie_children
from loops import both_loops
from tether.process import (
    ProcessRef,
    SpawnError,
    find_twins,
    reap,
    reap_orphans,
    start,
    stop_trees,
)
from tether.process._spawn import spawn_process

GRACE = 0.2
STUBBORN = """
    import signal, sys
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    open(sys.argv[1], "w").close()
    signal.pause()
"""


@both_loops
async def test_start_redirects_output_and_detaches_stdin(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = await start(
            python(
                "import os, sys; print(os.getsid(0) == os.getpid(), sys.stdin.read() == '');"
                " print('to stderr', file=sys.stderr); sys.exit(7)"
            ),
            output=fd,
        )
    finally:
        os.close(fd)
    assert await child.wait() == 7
    assert log.read_text().split() == ["True", "True", "to", "stderr"]


@both_loops
async def test_stop_trees_stops_every_tree_in_one_escalation(tmp_path: Path) -> None:
    ready = [tmp_path / f"ready-{i}" for i in range(3)]
    children = [await start(python(STUBBORN, str(path)), grace=GRACE) for path in ready]
    await wait_until(lambda: all(path.exists() for path in ready))
    started = time.monotonic()
    survivors = await stop_trees([c.ref for c in children], GRACE)
    took = time.monotonic() - started
    assert survivors == []
    assert [await c.wait() for c in children] == [-9, -9, -9]
    assert took < 2 * GRACE + 1.0, f"{took:.2f}s: one escalation per tree?"


def test_reap_takes_the_status_of_a_zombie_child_no_child_object_holds() -> None:
    pid = spawn_process(python("raise SystemExit(5)"), dict(os.environ), None)
    ref = ProcessRef.of(pid)
    deadline = time.monotonic() + 10
    while ref.state() != "Z" and time.monotonic() < deadline:
        time.sleep(0.005)
    assert reap(ref) == 5
    assert ref.state() is None


@both_loops
async def test_reap_orphans_reaps_only_zombies_no_child_answers_for() -> None:
    mine = await start(python("raise SystemExit(4)"))
    stray = spawn_process(python("raise SystemExit(6)"), dict(os.environ), None)
    await wait_until(lambda: len(zombie_children()) == 2)
    assert reap_orphans() == [(stray, 6)]
    assert await mine.wait() == 4  # its status was left to its Child


@both_loops
async def test_find_twins_by_epoch(tmp_path: Path) -> None:
    session = unique_session()
    env = {**os.environ, "TETHER_SESSION": session}
    olds = [await start(python("import signal; signal.pause()"), env={**env, "TETHER_EPOCH": "1"})]
    new = await start(python("import signal; signal.pause()"), env={**env, "TETHER_EPOCH": "2"})
    try:
        await wait_until(lambda: len(find_twins(session)) == 2)
        assert [ref.pid for ref in find_twins(session, epoch=1)] == [olds[0].pid]
        assert [ref.pid for ref in find_twins(session, exclude_epoch=1)] == [new.pid]
    finally:
        await stop_trees([olds[0].ref, new.ref], GRACE)
        await olds[0].wait()
        await new.wait()


@pytest.mark.parametrize("code", [0, 1, 255])
@both_loops
async def test_start_passes_exit_codes(code: int) -> None:
    child = await start(python(f"raise SystemExit({code})"))
    with anyio.fail_after(10):
        assert await child.wait() == code


def _no_descriptors(*_: object, **__: object) -> None:
    raise OSError(errno.EMFILE, "Too many open files")


@both_loops
async def test_issue_26_a_process_unreadable_for_want_of_descriptors_is_not_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the fault campaign: out of descriptors, /proc cannot be read, and a live
    harness was taken for dead (then swept). Its state is unknown (``?``), never gone."""
    alive, gone = ProcessRef.of(os.getpid()), ProcessRef(2**22 + 7, 1.0, 1)
    monkeypatch.setattr("tether.process._ref.read_stat", _no_descriptors)
    assert (alive.state(), alive.is_alive()) == ("?", True)
    assert (gone.state(), gone.is_alive()) == (None, False)


@both_loops
async def test_issue_26_a_child_that_cannot_be_watched_is_stopped_and_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spawned: list[int] = []
    real = tether.process._start.spawn_process

    def spy(*args: object, **kwargs: object) -> int:
        pid: int = real(*args, **kwargs)  # type: ignore[arg-type]
        spawned.append(pid)
        return pid

    monkeypatch.setattr("tether.process._start.spawn_process", spy)
    monkeypatch.setattr("tether.process._start.ProcessRef.of", _no_descriptors)
    with pytest.raises(SpawnError) as refused:
        await start(["sleep", "100"])
    assert refused.value.errno == errno.EMFILE
    assert not os.path.exists(f"/proc/{spawned[0]}")  # stopped and reaped
