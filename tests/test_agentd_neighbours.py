"""Issue 26: the faults next to the ones agentd was built for. Each test fails on d9d15f5 (the
store, the daemon's socket and its feeds under a neighbouring fault) and passes now, on real
daemons, harnesses and SQLite files."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sqlite3
import stat
import struct
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import trio

from helpers import (
    agentd_events,
    kill_marked,
    marked,
    python,
    reap_zombie_children,
    unique_session,
    wait_until,
)
from test_agentd import running
from test_agentd_faults import TETHER, cli_daemon, directory, tether_cmd
from tether import SqliteEpochStore
from tether.agentd._records import Records
from tether.wire._budget import FREE

__all__ = ["directory"]  # the fixture

# Holds the write lock of the SQLite file argv[1] (a writer mid-transaction: a backup, a
# sqlite3 shell) until its stdin closes; says "locked" once it holds it.
LOCKER = """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('locker', 'x')")
    print("locked", flush=True)
    sys.stdin.read()
    db.execute("ROLLBACK")
"""


class Locker:
    """Another process holding the store's write lock until ``release``."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            python(LOCKER, str(path)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "locked\n"

    def release(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def rows(directory: Path) -> list[tuple[str, int | None]]:
    done = subprocess.run(
        [*TETHER, "ps", "--json", "--socket", str(directory / "agentd.sock")],
        capture_output=True,
        timeout=30,
        check=True,
    )
    return [(r["state"], r["pid"]) for r in json.loads(done.stdout)["sessions"]]


async def test_row_5_a_daemon_restarting_on_a_locked_store_keeps_its_harnesses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon is SIGKILLed and restarted while another process holds the store's write
    lock for longer than a harness waits for its daemon: the new daemon listens, and the
    harness, reconnected, lives on (0 of 4 survived on d9d15f5)."""
    tmp_path.chmod(0o700)
    session = unique_session()
    monkeypatch.setenv("TETHER_RECONNECT_FOR", "2")  # the daemon passes it to its harnesses
    try:
        async with cli_daemon(tmp_path) as first:
            started = json.loads(await tether_cmd(tmp_path, "start", session))
            first.kill()
        locker = Locker(tmp_path / "epochs.sqlite3")
        try:
            async with cli_daemon(tmp_path):
                await trio.sleep(4.0)  # twice the harness's patience with its daemon
                assert psutil.Process(started["pid"]).status() != psutil.STATUS_ZOMBIE
                await wait_until(lambda: rows(tmp_path) == [("attached", started["pid"])])
                locker.release()
                answer = json.loads(await tether_cmd(tmp_path, "start", session))
                assert (answer["how"], answer["pid"]) == ("reattached", started["pid"])
        finally:
            locker.release()
    finally:
        kill_marked(session)
        # The first daemon's harness was orphaned to this test process (a subreaper).
        await wait_until(lambda: marked(session) == [])
        await wait_until(reap_zombie_children)


async def test_row_12_reads_and_reattach_never_wait_behind_a_locked_write(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock: ``start`` of a healthy attached session and
    ``ps`` answer at once, while a start that must write (a new session) waits its turn."""
    tmp_path.chmod(0o700)
    session, other = unique_session(), unique_session()
    try:
        async with cli_daemon(tmp_path):
            started = json.loads(await tether_cmd(tmp_path, "start", session))
            locker = Locker(tmp_path / "epochs.sqlite3")
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tether_cmd, tmp_path, "start", other)  # must write
                    await trio.sleep(0.5)
                    with trio.fail_after(5):  # the busy timeout is 30 s
                        answer = json.loads(await tether_cmd(tmp_path, "start", session))
                        assert (answer["how"], answer["pid"]) == ("reattached", started["pid"])
                        assert ("attached", started["pid"]) in rows(tmp_path)
                    locker.release()
            finally:
                locker.release()
    finally:
        kill_marked(session)
        kill_marked(other)


async def test_row_6_a_daemon_on_a_copy_of_the_store_leaves_the_original_s_harnesses(
    tmp_path: Path,
) -> None:
    """A second daemon is started on a copy of a live daemon's store: it does not adopt the
    original's harness (the copy is another store), so it never judges or kills it."""
    original, copy = tmp_path / "a", tmp_path / "b"
    for base in (original, copy):
        base.mkdir(mode=0o700)
    session = unique_session()
    try:
        async with cli_daemon(original):
            started = json.loads(await tether_cmd(original, "start", session))
            source = sqlite3.connect(original / "epochs.sqlite3")
            target = sqlite3.connect(copy / "epochs.sqlite3")
            source.backup(target)
            source.close()
            target.close()
            async with cli_daemon(copy):
                await trio.sleep(1.5)  # past the copy's patience (3 heartbeats of 0.2 s)
                kinds = [r["kind"] for r in agentd_events(copy, session)]
                assert "phantom" not in kinds
                assert "adopted" not in kinds
                assert rows(copy) == [("dead", None)]
            assert rows(original) == [("attached", started["pid"])]
            assert psutil.Process(started["pid"]).status() != psutil.STATUS_ZOMBIE
    finally:
        kill_marked(session)


def _flood(socket_path: str, count: int, seconds: float) -> list[socket.socket]:
    """``count`` connections, each sending a header for a 1 MiB frame and as much of its
    body as the daemon takes in ``seconds`` (never the last byte)."""
    body = struct.pack(">I", 1 << 20) + b"x" * ((1 << 20) - 1)
    conns = []
    for _ in range(count):
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(socket_path)
        conn.setblocking(False)
        conns.append(conn)
    sent = [0] * count
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, conn in enumerate(conns):
            try:
                sent[i] += conn.send(body[sent[i] : sent[i] + 65536])
            except BlockingIOError:
                continue
        time.sleep(0.01)
    return conns


async def test_row_7_half_written_frames_hold_a_bounded_share_of_memory(tmp_path: Path) -> None:
    """400 connections each push all but the last byte of a 1 MiB frame: the daemon holds at
    most its frame budget of them (16 MiB, 4 KiB a connection beyond it), not 400 MiB, and
    gives it back once they are closed (their frames time out). Its harnesses' reads never
    wait on that budget: a snapshot larger than a stranger's free share is read at once,
    and no pong queues behind it (the harness is never judged a phantom for it)."""
    tmp_path.chmod(0o700)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(400, (hard - 200) // 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    session = unique_session()
    try:
        async with cli_daemon(tmp_path) as process:
            started = json.loads(await tether_cmd(tmp_path, "start", session))
            # a snapshot shows the transcript's last lines: this grows it past FREE (on the
            # wire, each snowman is six bytes)
            await tether_cmd(tmp_path, "send", session, "\N{SNOWMAN}" * 300)
            daemon = psutil.Process(process.pid)
            idle = daemon.memory_info().rss
            conns = await trio.to_thread.run_sync(_flood, str(tmp_path / "agentd.sock"), count, 3.0)
            try:
                grown = (daemon.memory_info().rss - idle) / 2**20
                assert grown < 16 + count * 4 / 1024 + 20, f"{grown:.0f} MiB for {count}"
                assert rows(tmp_path) == [("attached", started["pid"])]  # it serves meanwhile
                for _ in range(3):
                    shown = await tether_run(tmp_path, "inspect", session, "--json")
                    assert shown.returncode == 0, shown.stderr
                    snapshot = json.loads(shown.stdout)["snapshot"]
                    assert len(json.dumps(snapshot)) > FREE  # more than a stranger's free share
                answered = time.monotonic()

                def pong_since() -> bool:  # the daemon read a beat sent after the snapshots
                    asked = time.monotonic()
                    age = json.loads(subprocess.run(
                        [*TETHER, "ps", "--json", "--socket", str(tmp_path / "agentd.sock")],
                        capture_output=True, timeout=30, check=True,
                    ).stdout)["sessions"][0]["heartbeat_age"]  # fmt: skip
                    return age is not None and age < asked - answered

                await wait_until(pong_since, timeout=20)
                assert rows(tmp_path) == [("attached", started["pid"])]
            finally:
                for conn in conns:
                    conn.close()
        assert "phantom" not in [r["kind"] for r in agentd_events(tmp_path, session)]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        kill_marked(session)


async def test_row_11_accept_short_of_descriptors_logs_once_per_burst(tmp_path: Path) -> None:
    """300 connections on a daemon limited to 128 descriptors: accept fails with EMFILE for a
    while; the log says so as the burst begins and as it ends, with no traceback."""
    tmp_path.chmod(0o700)
    async with cli_daemon(tmp_path, fd_limit=128):
        flood = []
        for _ in range(300):
            try:
                flood.append(await trio.open_unix_socket(str(tmp_path / "agentd.sock")))
            except OSError:
                break
        await trio.sleep(1.0)  # ten retries of accept
        for stream in flood:
            await stream.aclose()
        await wait_until(lambda: rows(tmp_path) == [], timeout=30)
    log = (tmp_path / "agentd.log").read_text()
    assert "Traceback" not in log
    assert 1 <= log.count("cannot accept connections now") <= 3
    assert log.count("accepting connections again") >= 1


async def tether_run(directory: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """A ``tether`` command against the daemon in ``directory``, however it ends."""
    with trio.fail_after(30):
        return await trio.run_process(
            [*TETHER, args[0], "--socket", str(directory / "agentd.sock"), *args[1:]],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip


async def test_row_8_a_log_swapped_for_a_device_or_fifo_is_refused_not_read(
    tmp_path: Path,
) -> None:
    """A tool replaces its session's log by a symlink to /dev/zero, then by a FIFO: ``tether
    logs`` answers at once that it will not read it (66), and the daemon goes on serving."""
    tmp_path.chmod(0o700)
    session = unique_session()
    try:
        async with cli_daemon(tmp_path) as process:
            await tether_cmd(tmp_path, "start", session)
            log = tmp_path / "sessions" / session / "harness.log"
            log.unlink()
            log.symlink_to("/dev/zero")
            done = await tether_run(tmp_path, "logs", session)
            assert done.returncode == 66
            assert b"is a symlink; not following it" in done.stderr
            log.unlink()
            os.mkfifo(log)
            async with trio.open_nursery() as nursery:  # 41 of these hung for good
                for _ in range(10):
                    nursery.start_soon(tether_run, tmp_path, "logs", session)
            done = await tether_run(tmp_path, "logs", session)
            assert (done.returncode, b"(a FIFO)" in done.stderr) == (66, True)
            assert [state for state, _ in rows(tmp_path)] == ["attached"]
            assert psutil.Process(process.pid).memory_info().rss < 200 * 2**20
    finally:
        kill_marked(session)


async def test_row_9_events_n_is_capped_and_read_from_the_end(tmp_path: Path) -> None:
    """``tether events -n 100000000`` on a 20 MB event log: 10,000 events at most, the
    newest, and the daemon's memory barely moves."""
    tmp_path.chmod(0o700)
    line = json.dumps({"kind": "spawned", "session": "old", "detail": "x" * 150}) + "\n"
    rows_ = (line.replace('"x', f'"{n} x', 1) for n in range(100_000))
    (tmp_path / "agentd.events.jsonl").write_text("".join(rows_))
    async with cli_daemon(tmp_path) as process:
        daemon = psutil.Process(process.pid)
        before = daemon.memory_info().rss
        done = await tether_run(tmp_path, "events", "-n", "100000000", "--json")
        assert done.returncode == 0, done.stderr
        shown = [json.loads(row) for row in done.stdout.splitlines()]
        assert len(shown) == 10_000
        assert shown[-1]["detail"].startswith("99999 x")
        assert daemon.memory_info().rss - before < 100 * 2**20


# argv[2] processes, each saying hello for a session nobody started (its own name), then
# leaving: a short-lived pretender per session.
PRETENDERS = """
    import os, socket, struct, sys, time, json
    for n in range(int(sys.argv[2])):
        if os.fork() == 0:
            body = json.dumps({"type": "hello", "session": f"bogus-{n}", "epoch": 1,
                               "pid": os.getpid(), "create_time": time.time()}).encode()
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(sys.argv[1])
            conn.sendall(struct.pack(">I", len(body)) + body)
            conn.recv(65536)
            os._exit(0)
        os.wait()
"""


async def test_row_10_a_refused_hello_creates_no_session(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    async with cli_daemon(tmp_path):
        socket_path = str(tmp_path / "agentd.sock")
        await trio.run_process(python(PRETENDERS, socket_path, "200"))
        assert rows(tmp_path) == []
        done = await tether_run(tmp_path, "send", "bogus-7", "hello")
        assert (done.returncode, b"no such session" in done.stderr) == (69, True)
    log = (tmp_path / "agentd.log").read_text()
    assert log.count("refused a hello for unknown session") == 1  # once a minute


async def test_a_sweep_never_stops_a_live_harness_of_its_epoch(directory: Path) -> None:
    """Found by the fault campaign: a harness taken for dead came back (said hello again)
    while its old watcher still swept its epoch, and the sweep stopped it. A sweep leaves
    the processes of an epoch whose harness is the session's and alive."""
    session = unique_session()
    try:
        async with running(directory) as daemon:
            started = await daemon.agentd.start_agent(session)
            state = daemon.agentd._sessions.get(session)
            await daemon.agentd._harnesses.sweep(state, started.epoch)
            again = await daemon.agentd.start_agent(session)
            assert (again.how, again.pid) == ("reattached", started.pid)
    finally:
        kill_marked(session)


async def test_a_session_log_swapped_for_a_symlink_or_fifo_is_replaced_at_spawn(
    directory: Path, tmp_path: Path
) -> None:
    """Found by the fault campaign: the daemon opened a session's log, swapped for a FIFO by a
    tool, to start its next harness, and blocked for good (and a symlink would have had it
    append to any file it points at). Such a log is replaced by a new one."""
    session = unique_session()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("mine\n")
    try:
        async with running(directory) as daemon:
            started = await daemon.agentd.start_agent(session)
            log = directory / "sessions" / session / "harness.log"
            for swap in (lambda: log.symlink_to(elsewhere), lambda: os.mkfifo(log)):
                log.unlink()
                swap()
                os.kill(started.pid, signal.SIGKILL)
                with trio.fail_after(20):
                    started = await daemon.agentd.start_agent(session)
                assert started.how == "respawned"
                assert stat.S_ISREG(log.lstat().st_mode)
            assert elsewhere.read_text() == "mine\n"
    finally:
        kill_marked(session)


async def test_a_live_harness_its_record_does_not_name_is_adopted_not_superseded(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the campaign: a daemon respawned a session, could not record the new harness
    (the disk was full) and was killed; the next daemon read a record naming a dead pid,
    respawned the session again, and superseded the live harness, whose tool was interrupted.
    A live harness marked with the session's current epoch and this store is adopted instead."""
    session = unique_session()
    try:
        async with running(directory, stop=False) as daemon:
            first = await daemon.agentd.start_agent(session)
            os.kill(first.pid, signal.SIGKILL)
            await wait_until(lambda: daemon.agentd.status()[0].pid is None)
            with trio.fail_after(10):  # and recorded so, before the disk "fills"
                while (record := await daemon.store.record(session)) and record.pid is not None:
                    await trio.sleep(0.01)

            async def full_disk(*args: object, **kwargs: object) -> None:
                return None  # the record is not written

            monkeypatch.setattr(Records, "save", full_disk)
            second = await daemon.agentd.start_agent(session)
            assert (second.how, second.epoch) == ("respawned", 2)
        monkeypatch.undo()
        async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
            record = await store.record(session)
        assert record is not None
        assert (record.pid, record.epoch) == (None, 1)  # stale: epoch 2 is not in it
        async with running(directory) as daemon:
            again = await daemon.agentd.start_agent(session)
            assert (again.how, again.pid, again.epoch) == ("reattached", second.pid, 2)
        (adopted,) = [r for r in agentd_events(directory, session) if r["kind"] == "adopted"]
        assert (adopted["pid"], adopted["epoch"]) == (second.pid, 2)
        assert adopted["detail"].startswith("found by its mark (the record names epoch 1)")
    finally:
        kill_marked(session)
