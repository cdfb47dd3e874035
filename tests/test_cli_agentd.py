"""``tether agentd`` as a real daemon process, driven by ``tether start|send|ps|stop``.

SIGTERM stops the daemon cleanly and names the sender; its harnesses keep running and the next
daemon on the same store adopts them (``reattached``, same pid); ``--stop-harnesses`` stops them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import trio

from helpers import kill_marked, marked, reap_zombie_children, unique_session, wait_until

TETHER = [sys.executable, "-m", "tether"]


@asynccontextmanager
async def daemon(directory: Path, *extra: str) -> AsyncIterator[subprocess.Popen[bytes]]:
    socket = directory / "agentd.sock"
    log = open(directory / "agentd.log", "ab")  # noqa: SIM115, ASYNC230
    process = subprocess.Popen(
        [
            *TETHER,
            "agentd",
            "--socket",
            str(socket),
            "--heartbeat",
            "0.2",
            "--grace",
            "0.2",
            *extra,
        ],
        stdout=log,
        stderr=log,
    )
    try:
        await wait_until(socket.exists)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        log.close()


async def tether(directory: Path, *args: str, check: bool = True) -> str:
    result = await trio.run_process(
        [*TETHER, *args[:1], "--socket", str(directory / "agentd.sock"), *args[1:]],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return (result.stdout if result.returncode == 0 else result.stderr).decode()


async def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(10):
        while process.poll() is None:
            await trio.sleep(0.01)
    return process.returncode


async def test_the_daemon_survives_its_restart_without_duplicating_harnesses(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o700)
    session = unique_session()
    try:
        async with daemon(tmp_path) as first:
            started = json.loads(await tether(tmp_path, "start", session))
            assert started["how"] == "spawned"
            sent = json.loads(await tether(tmp_path, "send", session, "hello"))
            assert (sent["pid"], sent["attempts"]) == (started["pid"], 1)
            table = await tether(tmp_path, "ps")
            assert table.splitlines()[0].split()[:4] == ["SESSION", "STATE", "EPOCH", "PID"]
            assert f"{session}  attached  1" in table
            assert await stop(first) == 0
        log = (tmp_path / "agentd.log").read_text()
        assert f"received SIGTERM from pid={os.getpid()}" in log
        assert "harnesses keep running" in log
        assert psutil.Process(started["pid"]).status() != psutil.STATUS_ZOMBIE

        async with daemon(tmp_path, "--stop-harnesses") as second:
            again = json.loads(await tether(tmp_path, "start", session))
            assert (again["how"], again["pid"], again["epoch"]) == ("reattached", started["pid"], 1)
            rows = json.loads(await tether(tmp_path, "ps", "--json"))["sessions"]
            assert [(r["session"], r["state"], r["pid"]) for r in rows] == [
                (session, "attached", started["pid"])
            ]
            refused = await tether(tmp_path, "start", "../x", check=False)
            assert "session name '../x'" in refused
            assert await stop(second) == 0
        # The harness tree was stopped. Orphaned by the first daemon, its processes were
        # reparented to the nearest subreaper, this test, which must reap them as init would.
        await wait_until(lambda: marked(session) == [] and reap_zombie_children())
    finally:
        kill_marked(session)


async def test_commands_without_a_daemon_fail_with_a_reason(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    answer = await tether(tmp_path, "ps", check=False)
    assert answer.startswith("tether ps: no agentd at ")
