"""tether.testing's fakes against real processes: the example harness talks to ``FakeAgentd``
exactly as to agentd, and ``agent_script`` children behave as asked under a ``ChildGroup``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import trio

from helpers import kill_marked, unique_session, wait_until
from tether import ChildGroup, wire
from tether.harness import EXIT_SUPERSEDED
from tether.testing import FakeAgentd, agent_script


async def test_a_harness_is_welcomed_pinged_prompted_and_superseded(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    session = unique_session()
    async with FakeAgentd.serving(tmp_path / "agentd.sock", heartbeat=0.05) as daemon:
        harness = subprocess.Popen(
            [sys.executable, "-m", "tether.harness.example"],
            env={
                **os.environ,
                "TETHER_SESSION": session,
                "TETHER_EPOCH": "4",
                "TETHER_AGENTD": str(daemon.path),
                "TETHER_STATE_DIR": str(tmp_path),
                "TETHER_GRACE": "0.3",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await daemon.connected.wait()
            await wait_until(lambda: len(daemon.pongs) >= 2)  # its loop answers pings
            assert await daemon.prompt("hello", steps=1) == 1
            transcript = tmp_path / f"{session}.jsonl"
            await wait_until(lambda: transcript.exists() and "hello" in transcript.read_text())
            assert await daemon.supersede(5) == 1
            await wait_until(lambda: harness.poll() is not None)
        finally:
            if harness.poll() is None:
                harness.kill()
            harness.wait()
            kill_marked(session)
    assert harness.returncode == EXIT_SUPERSEDED
    (hello,) = daemon.hellos
    assert (hello.session, hello.epoch, hello.pid) == (session, 4, harness.pid)


async def test_a_superseding_fake_answers_the_first_hello(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    session = unique_session()
    async with FakeAgentd.serving(tmp_path / "a.sock", answer="superseded", current=9) as daemon:
        done = await trio.run_process(
            [sys.executable, "-m", "tether.harness.example"],
            env={
                **os.environ,
                "TETHER_SESSION": session,
                "TETHER_EPOCH": "2",
                "TETHER_AGENTD": str(daemon.path),
                "TETHER_STATE_DIR": str(tmp_path),
            },
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == EXIT_SUPERSEDED
    assert b"the current epoch is 9" in done.stderr


async def test_agent_scripts_stream_exit_ignore_sigint_and_daemonize(tmp_path: Path) -> None:
    session = unique_session()
    async with ChildGroup(session, 1, grace=0.2) as group:
        quick = await group.spawn(agent_script(tmp_path, parts=2, interval=0.01, exit_code=7))
        assert await quick.wait() == 7
        stubborn = await group.spawn(agent_script(tmp_path, parts=10_000, ignore_sigint=True))
        escaper = await group.spawn(agent_script(tmp_path, parts=10_000, daemonize=True))
        await wait_until(lambda: len(group.members()) >= 3)  # the escaped sleep is counted
        await wait_until(lambda: _ignores_sigint(stubborn.pid))  # not still starting up
        assert await stubborn.stop() == -15  # SIGINT ignored: the SIGTERM step ended it
    assert escaper.returncode is not None
    assert group.members() == set()


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` has set SIGINT to be ignored (the ``SigIgn`` mask of /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


async def test_a_harness_beats_for_a_revision_3_daemon_and_not_for_an_older_one(
    tmp_path: Path,
) -> None:
    """Told revision 3, the harness's loop sends a pong every heartbeat unasked (a beat, seq
    0); told revision 1, it only answers pings. The fake pings both every heartbeat, so the
    pings answered mark the heartbeats in which a beat would have come."""
    tmp_path.chmod(0o700)
    beats: dict[int, list[int]] = {}
    for revision in (3, 1):
        session = unique_session()
        path = tmp_path / f"r{revision}.sock"
        (tmp_path / str(revision)).mkdir()
        options = {"heartbeat": 0.1, "revision": revision}
        async with FakeAgentd.serving(path, **options) as daemon:
            harness = subprocess.Popen(
                [sys.executable, "-m", "tether.harness.example"],
                env={
                    **os.environ,
                    "TETHER_SESSION": session,
                    "TETHER_EPOCH": "1",
                    "TETHER_AGENTD": str(path),
                    "TETHER_STATE_DIR": str(tmp_path / str(revision)),
                },
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                with trio.fail_after(20):
                    await daemon.connected.wait()
                if revision == 3:
                    await wait_until(lambda: daemon.pongs.count(0) >= 5)
                else:  # five pings answered: five heartbeats with no beat
                    await wait_until(lambda: len(daemon.pongs) >= 5)
            finally:
                harness.terminate()  # its own teardown stops its tree
                await trio.to_thread.run_sync(harness.wait, 20)
                kill_marked(session)
            beats[revision] = list(daemon.pongs)
    assert beats[3].count(0) >= 5
    assert len(beats[1]) >= 5
    assert 0 not in beats[1], "a harness beat for a daemon that did not ask"


async def test_a_daemon_asking_for_a_microsecond_heartbeat_gets_at_most_100_beats_a_second(
    tmp_path: Path,
) -> None:
    """A Welcome's heartbeat comes from the daemon: a harness never beats faster than every
    10 ms (``MIN_BEAT``), whatever it is told, so a bad daemon cannot make it spin."""
    tmp_path.chmod(0o700)
    session = unique_session()
    options = {"heartbeat": 1e-6, "pinging": False, "revision": 3}
    async with FakeAgentd.serving(tmp_path / "a.sock", **options) as daemon:
        harness = subprocess.Popen(
            [sys.executable, "-m", "tether.harness.example"],
            env={
                **os.environ,
                "TETHER_SESSION": session,
                "TETHER_EPOCH": "1",
                "TETHER_AGENTD": str(tmp_path / "a.sock"),
                "TETHER_STATE_DIR": str(tmp_path),
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with trio.fail_after(20):
                await daemon.connected.wait()
            await wait_until(lambda: len(daemon.pongs) >= 1)
            started = trio.current_time()
            await wait_until(lambda: len(daemon.pongs) >= 21)
            elapsed = trio.current_time() - started
        finally:
            harness.terminate()
            await trio.to_thread.run_sync(harness.wait, 20)
            kill_marked(session)
    # 20 beats take 0.2 s at 100 a second; half that leaves room for beats read late, and a
    # harness that spun would send them in well under a millisecond.
    assert elapsed >= 0.1, f"20 beats in {elapsed:.3f}s"


async def test_fake_agentd_survives_a_harness_that_leaves_abruptly(tmp_path: Path) -> None:
    """Issue 42, part 3: a harness on its way out made the ping task's send fail, and the
    error crashed the fake and the user's test with it. Each leaves now, and the next harness
    is welcomed; so does one the fake drops."""
    tmp_path.chmod(0o700)
    async with FakeAgentd.serving(tmp_path / "agentd.sock", heartbeat=0.005) as daemon:
        for epoch in (1, 2, 3):
            connection = await wire.connect(daemon.path)
            await connection.send(wire.Hello(unique_session(), epoch, os.getpid(), 0.0, 3))
            assert isinstance(await connection.receive(), wire.Welcome)
            await wait_until(lambda: daemon._connections != {})
            # Stop reading first, as a harness on its way out does: the next ping fails (EPIPE)
            # while the fake still reads the connection.
            connection._stream.socket.shutdown(socket.SHUT_RD)
            await trio.sleep(0.05)  # ten pings' worth: none may crash the fake
            await connection.aclose()
            await wait_until(lambda: daemon._connections == {})
        connection = await wire.connect(daemon.path)
        await connection.send(wire.Hello(unique_session(), 4, os.getpid(), 0.0, 3))
        assert isinstance(await connection.receive(), wire.Welcome)
        await daemon.drop()
        await wait_until(lambda: daemon._connections == {})
        await connection.aclose()
    assert [hello.epoch for hello in daemon.hellos] == [1, 2, 3, 4]
