"""The teardown's view of zombies, with real processes (issue 46, found by a third-party MCP
server's teardown): a zombie whose parent is itself a zombie leader (its last threads still
exiting) is handed to the parent's reaper in a moment, so it is not SIGKILLed and reported as
a survivor; a process found and reaped by its keeper since is finished, not unfinished."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time

import pytest

from helpers import python, unique_session, wait_until
from tether import ChildGroup, ProcessRef
from tether.process._proc import read_stat
from tether.process._teardown import _reap, _unfinished

SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine())

# Its child exits and is never waited for (a zombie); then its main thread alone ends with the
# raw exit system call while a thread sleeps on: a zombie leader whose process lives on.
LEADER = """
    import ctypes, os, subprocess, sys, threading, time
    child = subprocess.Popen(["true"])
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.001)
    threading.Thread(target=time.sleep, args=(600,)).start()
    print(os.getpid(), child.pid, flush=True)
    ctypes.CDLL(None).syscall(int(sys.argv[1]), 0)
"""

pytestmark = pytest.mark.skipif(SYS_EXIT is None, reason="the exit system call's number")


async def test_a_zombie_of_a_dying_kept_parent_is_done_with() -> None:
    async with ChildGroup(unique_session(), 1, grace=0.3) as group:
        leader = await group.spawn(python(LEADER, str(SYS_EXIT)), stdout=subprocess.PIPE)
        line = b""
        while not line.endswith(b"\n"):
            line += await leader.stdout.receive_some()  # type: ignore[union-attr]
        parent, child = map(int, line.split())
        await wait_until(lambda: _state(parent) == "Z")
        assert read_stat(child) is not None
        assert read_stat(child).ppid == parent  # type: ignore[union-attr]
        # Its parent is the keeper, not us: the keeper gets the child's zombie and reaps it.
        assert _reap(ProcessRef.of(child), {parent, child})
        # This leader lives on in its sleeping thread (a process truly exiting is gone in a
        # moment): end it here, as a stop's SIGINT cannot (its main thread held the GIL).
        leader.send_signal(signal.SIGKILL)
        await leader.wait()


def test_a_zombie_of_a_dying_parent_of_ours_is_not_done_with() -> None:
    process = subprocess.Popen(python(LEADER, str(SYS_EXIT)), stdout=subprocess.PIPE)
    assert process.stdout is not None
    with process.stdout:
        parent, child = map(int, process.stdout.readline().split())
    try:
        deadline = time.monotonic() + 10
        while _state(parent) != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.001)
        # It comes to this process, a subreaper (conftest), which must reap it itself.
        assert not _reap(ProcessRef.of(child), {parent, child})
    finally:
        process.kill()
        process.wait()
    # Its child's zombie came here, as asserted: reap it.
    deadline = time.monotonic() + 10
    while os.waitpid(child, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_a_process_reaped_since_it_was_found_is_finished() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    ref = ProcessRef.of(process.pid)
    process.wait()
    assert _unfinished({ref}, {ref}) == set()


def _state(pid: int) -> str | None:
    stat = read_stat(pid)
    return None if stat is None else stat.state
