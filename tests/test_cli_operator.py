"""What an operator of a running ``tether agentd`` has (issue 20): ``events`` and ``logs`` over
the socket (following too), a ``ps`` awk can read, JSON logs with the events' fields, SIGHUP
reopening the log file, and Prometheus metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from helpers import kill_marked, marked, reap_zombie_children, wait_until
from test_cli_agentd import daemon, stop

TETHER = [sys.executable, "-m", "tether"]


@asynccontextmanager
async def operated(directory: Path, *extra: str) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A ``tether agentd`` that stops its harnesses when SIGTERMed at the end; what they
    leave is reaped (this test process is their nearest subreaper)."""
    directory.chmod(0o700)
    try:
        async with daemon(directory, "--stop-harnesses", *extra) as process:
            yield process
            assert await stop(process) == 0
    finally:
        for session in ("s1", "s2"):
            kill_marked(session)
        await wait_until(lambda: not marked("s1") and not marked("s2") and reap_zombie_children())


def run(directory: Path, *args: str) -> str:
    done = subprocess.run(
        [*TETHER, *args[:1], "--socket", str(directory / "agentd.sock"), *args[1:]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_events_and_logs_show_what_happened_and_follow(tmp_path: Path) -> None:
    async with operated(tmp_path):
        run(tmp_path, "start", "s1")
        lines = [json.loads(line) for line in run(tmp_path, "events", "--json").splitlines()]
        assert [e["kind"] for e in lines][:2] == ["spawned", "attached"]
        assert lines[0]["time"].endswith("Z")
        assert lines[0]["host"]
        text = run(tmp_path, "events", "--session", "s1", "-n", "1")
        assert text.count("\n") == 1
        assert " s1 attached " in text
        follower = subprocess.Popen(
            [*TETHER, "events", "--follow", "--json", "--socket", str(tmp_path / "agentd.sock")],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert follower.stdout is not None
            for _ in range(2):  # the past first
                follower.stdout.readline()
            run(tmp_path, "send", "s1", "hello")
            seen = [json.loads(follower.stdout.readline())["kind"] for _ in range(1)]
            assert seen == ["delivered"]
        finally:
            follower.terminate()
            follower.communicate(timeout=10)
        assert "engine started" in run(tmp_path, "logs", "s1")
        tail = subprocess.Popen(
            [*TETHER, "logs", "s1", "-f", "-n", "1", "--socket", str(tmp_path / "agentd.sock")],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert tail.stdout is not None
            tail.stdout.readline()
            # The example agent prints a line every 0.1 s: it keeps coming.
            assert "agent: thinking" in tail.stdout.readline()
        finally:
            tail.terminate()
            tail.communicate(timeout=10)


async def test_an_unknown_session_is_one_rule_for_every_command(tmp_path: Path) -> None:
    """Issue 30: ``events --session``, ``logs``, ``send``, ``stop`` and ``reset`` of a session
    the daemon does not know all exit 69 naming it (``events`` exited 0 and showed nothing)."""
    async with operated(tmp_path):
        for args in (["events", "--session"], ["logs"], ["send"], ["stop"], ["reset"]):
            extra = ["hello"] if args == ["send"] else []
            done = subprocess.run(
                [*TETHER, *args[:1], "--socket", str(tmp_path / "agentd.sock"), *args[1:],
                 "nosuch", *extra],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 69, (args, done.stderr)
            assert "nosuch" in done.stderr
            assert "no such session" in done.stderr


async def test_ps_columns_hold_for_awk_and_filter_by_state(tmp_path: Path) -> None:
    async with operated(tmp_path):
        run(tmp_path, "start", "s1")
        run(tmp_path, "start", "s2")
        run(tmp_path, "stop", "s2")
        rows = [line.split() for line in run(tmp_path, "ps", "--no-headers").splitlines()]
        assert [row[:2] for row in rows] == [["s1", "attached"], ["s2", "stopped"]]
        header = run(tmp_path, "ps").splitlines()[0].split()
        assert all(len(row) >= len(header) for row in rows)  # no empty cell, no split one
        assert run(tmp_path, "ps", "--state", "stopped", "--no-headers").split()[0] == "s2"
        watch = subprocess.Popen(
            [*TETHER, "ps", "--watch", "0.2", "--no-headers", "--socket",
             str(tmp_path / "agentd.sock")],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert watch.stdout is not None
            shown = [watch.stdout.readline() for _ in range(5)]
            assert sum(line.startswith("s1 ") for line in shown) >= 2  # shown again
        finally:
            watch.send_signal(signal.SIGINT)
            watch.communicate(timeout=10)
        assert watch.returncode == 0


async def test_json_logs_carry_the_event_fields_and_sighup_reopens_the_file(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agentd.json.log"
    async with operated(tmp_path, "--log-format", "json", "--log-file", str(log)) as process:
        run(tmp_path, "start", "s1")
        records = [json.loads(line) for line in log.read_text().splitlines()]
        spawned = next(r for r in records if r.get("event_kind") == "spawned")
        assert spawned["level"] == "info"
        assert spawned["event_session"] == "s1"
        assert spawned["time"].endswith("Z")
        log.rename(tmp_path / "agentd.json.log.1")  # what logrotate does
        process.send_signal(signal.SIGHUP)
        await wait_until(log.exists)
        run(tmp_path, "stop", "s1")
        await wait_until(lambda: '"event_kind": "stopped"' in log.read_text())
        assert process.poll() is None  # SIGHUP does not stop it
        assert "reopening the log files" in log.read_text()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_metrics_are_served_for_prometheus(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    where = f"127.0.0.1:{free_port()}"
    async with operated(tmp_path, "--metrics", where):
        run(tmp_path, "send", "s1", "hi", "--create")

        async def scrape() -> str:
            async with httpx.AsyncClient() as client:
                return (await client.get(f"http://{where}/metrics")).text

        with trio.fail_after(20):
            while True:
                try:
                    text = await scrape()
                    break
                except httpx.HTTPError:
                    await trio.sleep(0.05)
        assert 'tether_sessions{state="attached"} 1.0' in text
        assert 'tether_deliveries_total{outcome="delivered"} 1.0' in text
        assert "tether_delivery_seconds_bucket" in text
        assert 'tether_heartbeat_age_seconds{session="s1"}' in text
        assert "tether_lease_held 1.0" in text


def test_bad_metrics_addresses_and_a_missing_extra_are_one_line(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    sock = str(tmp_path / "a.sock")
    done = subprocess.run(
        [*TETHER, "agentd", "--socket", sock, "--metrics", "nowhere"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 64, done.stderr
    assert "--metrics wants HOST:PORT" in done.stderr
    hide = (
        "import sys; sys.modules['prometheus_client'] = None; from tether.cli import main;"
        " sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, "agentd", "--socket", sock, "--metrics", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 69
    assert "pip install 'tether[metrics]'" in done.stderr


ONE_SHOT = """
import sys
from tether.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("trio", "tether.agentd._daemon", "tether.epochs") if m in sys.modules)
print("imported:", heavy, file=sys.stderr)
sys.exit(code if not heavy else 99)
"""


async def test_one_shot_commands_run_without_importing_trio(tmp_path: Path) -> None:
    """``ps``, ``start``, ``stop`` and a refused ``send`` are one request each: they answer
    as they always did, without importing trio or the daemon (a fraction of the start-up)."""
    sock = str(tmp_path / "agentd.sock")
    async with operated(tmp_path):
        for args in (["start", "s1"], ["ps", "--json"], ["stop", "s1"], ["send", "nope", "hi"]):
            done = subprocess.run(
                [sys.executable, "-c", ONE_SHOT, args[0], "--socket", sock, *args[1:]],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert "imported: []" in done.stderr, done.stderr
            if args[0] == "send":
                assert done.returncode == 69, done.stderr  # the daemon's code for it
                assert "tether send: session 'nope': no such session" in done.stderr
            else:
                assert done.returncode == 0, done.stderr
        rows = json.loads(run(tmp_path, "ps", "--json"))["sessions"]
        assert [(row["session"], row["state"]) for row in rows] == [("s1", "stopped")]
    missing = subprocess.run(
        [sys.executable, "-c", ONE_SHOT, "ps", "--socket", sock],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert missing.returncode == 69, missing.stderr
    assert f"tether ps: no agentd at {sock}" in missing.stderr


def test_a_daemon_that_never_answers_is_a_timeout_not_a_hang(tmp_path: Path) -> None:
    """``send --timeout`` bounds the one-shot client's wait: a listener that accepts and never
    answers gives 75 and one line."""
    import socket

    tmp_path.chmod(0o700)
    path = str(tmp_path / "mute.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        done = subprocess.run(
            [*TETHER, "send", "s1", "hi", "--timeout", "0.5", "--socket", path],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 75, done.stderr
    said = done.stderr.strip()
    assert said.startswith("tether send: no answer from agentd within 0.5s (the prompt may"), said
    assert re.search(r"`tether send --id [0-9a-f]{32} s1 \.\.\.` delivers it once\)$", said), said


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"\xff\xff\xff\xff", "agentd closed the connection: frame of 4294967295 bytes exceeds"),
        (b"\x00\x00\x00\x05{nope", "agentd closed the connection: invalid JSON"),
        (b"\x00\x00\x00\x40{", "agentd closed the connection: connection cut mid-frame"),
        (b"", "agentd closed the connection without an answer"),
        (b'\x00\x00\x00\x0f{"type":"ping"}', "agentd closed the connection:"),
    ],
)
def test_a_hostile_daemon_gets_one_line_and_76_from_a_one_shot_command(
    tmp_path: Path, answer: bytes, says: str
) -> None:
    """The blocking client bounds what it reads as the daemon does: an oversized header, a
    body that is not JSON, a cut frame, silence or a message of the wrong kind is one line
    and EX_PROTOCOL, never a traceback or a 4 GiB allocation."""
    import socket
    import threading

    tmp_path.chmod(0o700)
    path = str(tmp_path / "hostile.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)  # the request
            connection.sendall(answer)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        done = subprocess.run(
            [*TETHER, "ps", "--socket", path],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        server.join(10)
        listener.close()
    assert done.returncode == 76, done.stderr
    assert done.stderr.startswith(f"tether ps: {says}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
