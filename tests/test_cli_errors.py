"""Every mistake a person can make on the command line is one line on stderr and a sysexits
code, never a traceback (issue 20); ``--debug`` shows the traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import wait_until
from test_cli_agentd import daemon

TETHER = [sys.executable, "-m", "tether"]


def tether(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, str]:
    done = subprocess.run(
        [*TETHER, *args], capture_output=True, text=True, input=stdin, env=env, timeout=60,
        check=False,
    )  # fmt: skip
    return done.returncode, done.stderr


def one_line(stderr: str) -> str:
    """The error line (argparse prints the usage first); no traceback anywhere."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("tether")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["agentd", "--heartbeat", "-1"], "--heartbeat: must be above 0: -1"),
        (["agentd", "--grace", "soon"], "--grace: not a number: 'soon'"),
        (["agentd", "--restart-limit", "0"], "--restart-limit: must be above 0: 0"),
        (["agentd", "--on-stall", "panic"], "invalid choice: 'panic'"),
        (["ps", "--watch", "0"], "--watch: must be above 0: 0"),
        (["send"], "the following arguments are required: session, text"),
        (["fly"], "invalid choice: 'fly'"),
        (["run", "--bogus"], "unknown option --bogus"),
        (["run"], "a command is needed"),
    ],
)
def test_a_bad_command_line_is_64_with_one_line(args: list[str], says: str) -> None:
    code, stderr = tether(*args)
    assert code == 64
    assert says in one_line(stderr)


def test_a_socket_directory_others_can_reach_is_77(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    code, stderr = tether("agentd", "--socket", str(tmp_path / "a.sock"))
    assert code == 77
    assert "has mode 0755; it must be 0700" in one_line(stderr)


def test_the_etcd_store_without_its_extra_is_69(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    hide = "import sys; sys.modules['httpx'] = None; from tether.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", hide, "agentd", "--socket", str(tmp_path / "a.sock"),
         "--store", "etcd://127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 69
    assert "pip install 'tether[etcd]'" in one_line(done.stderr)


def test_etcd_flags_that_cannot_work_are_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    sock, store = str(tmp_path / "a.sock"), "etcd://127.0.0.1:1"
    code, stderr = tether("agentd", "--socket", sock, "--store", store, "--etcd-cacert", "/nope")
    assert (code, "cannot read /nope" in one_line(stderr)) == (66, True)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_ETCD_PASSWORD"}
    code, stderr = tether("agentd", "--socket", sock, "--store", store, "--etcd-user", "u", env=env)
    assert code == 64
    assert "--etcd-password-file or $TETHER_ETCD_PASSWORD" in one_line(stderr)


def test_commands_without_a_daemon_are_69(tmp_path: Path) -> None:
    for args in (["ps"], ["start", "s1"], ["events"], ["logs", "s1"]):
        code, stderr = tether(*args, "--socket", str(tmp_path / "none.sock"))
        assert code == 69
        assert "no agentd at" in one_line(stderr)


async def test_the_daemon_s_refusals_have_their_codes(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    sock = str(tmp_path / "agentd.sock")
    async with daemon(tmp_path):
        for args in (["stop", "nosuch"], ["reset", "nosuch"], ["send", "nosuch", "hi"]):
            code, stderr = tether(*args, "--socket", sock)
            assert code == 69
            assert "no such session (tether start it, or use --create)" in one_line(stderr)
        code, stderr = tether("logs", "nosuch", "--socket", sock)
        assert (code, "no such session" in one_line(stderr)) == (69, True)
        code, stderr = tether("inspect", "nosuch", "--socket", sock)  # it takes no --create
        assert code == 69
        assert "no such session (tether start it)" in one_line(stderr)
        code, stderr = tether("start", "../x", "--socket", sock)
        assert code == 65
        assert "session name '../x'" in one_line(stderr)
        huge = "x" * 2_000_000
        code, stderr = tether("send", "big", "-", "--create", "--socket", sock, stdin=huge)
        assert code == 65
        assert "exceeds" in one_line(stderr)
        second, stderr = tether("agentd", "--socket", sock)  # the same socket and store
        assert second == 75
        assert "served by another daemon" in one_line(stderr)
        other = str(tmp_path / "other.sqlite3")
        second, stderr = tether("agentd", "--socket", sock, "--store", other)
        assert second == 75
        assert "the socket is in use" in one_line(stderr)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    code, stderr = tether("--debug", "agentd", "--socket", str(tmp_path / "a.sock"))
    assert code == 77
    assert "Traceback" in stderr


def test_version_and_help_for_every_command() -> None:
    from tether import __version__

    code, _ = tether("--version")
    done = subprocess.run([*TETHER, "--version"], capture_output=True, text=True, check=True)
    assert (code, done.stdout.strip()) == (0, f"tether {__version__}")
    for command in ("demo", "agentd", "ps", "start", "send", "stop", "reset", "events", "logs",
                    "transcript", "run"):  # fmt: skip
        shown = subprocess.run(
            [*TETHER, command, "--help"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        assert "usage: tether" in shown
        if command not in ("run", "transcript", "start", "stop", "reset", "demo"):
            assert "(default:" in shown, command  # defaults are shown
        if command not in ("run", "demo"):
            assert "example" in shown, command


async def test_send_reads_its_prompt_from_stdin_and_create_makes_a_session(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o700)
    sock = str(tmp_path / "agentd.sock")
    async with daemon(tmp_path):
        code, stderr = tether("send", "s1", "-", "--create", "--socket", sock, stdin="a secret\n")
        assert code == 0, stderr
        transcript = tmp_path / "sessions" / "s1" / "s1.jsonl"
        await wait_until(lambda: transcript.exists() and "a secret" in transcript.read_text())
        code, _ = tether("stop", "s1", "--socket", sock)
        assert code == 0


@pytest.mark.parametrize(
    ("harness", "code", "said"),
    [
        (["python", "no-such-harness.py"], 66, "no-such-harness.py does not exist"),
        (["/no/such/harness"], 66, "No such file or directory"),
        (["/etc/passwd"], 77, "Permission denied"),
    ],
    ids=["missing-script", "missing-program", "not-executable"],
)
def test_a_harness_that_cannot_run_is_refused_before_the_daemon_starts(
    tmp_path: Path, harness: list[str], code: int, said: str
) -> None:
    """Issue 30: found at daemon start, not at the first ``start`` as a harness that died."""
    returncode, stderr = tether("agentd", "--socket", str(tmp_path / "d" / "agentd.sock"), "--",
                                *harness)  # fmt: skip
    assert returncode == code
    assert said in one_line(stderr)
    assert not (tmp_path / "d").exists()  # nothing was started


async def test_a_harness_that_cannot_start_is_78_not_try_again(tmp_path: Path) -> None:
    """Issue 43, row 5: a harness that fails to import exited 75 (EX_TEMPFAIL, "try again");
    it is a configuration to fix (78), its log's last line named."""
    tmp_path.chmod(0o700)
    broken = [sys.executable, "-c", "import no_such_harness_module"]
    async with daemon(tmp_path, "--", *broken):
        code, stderr = tether("start", "broken", "--socket", str(tmp_path / "agentd.sock"))
    assert code == 78, stderr
    assert "exited with code 1 before saying hello" in one_line(stderr)
    assert "No module named 'no_such_harness_module'" in one_line(stderr)


def test_help_names_each_default_once_and_the_socket_rule() -> None:
    """Issue 43, row 5: ``agentd --help`` said "(default: ...) (default: None)"; ``--socket``
    did not say its directory must be 0700; ``stop`` said the session stays down."""
    done = subprocess.run(
        [*TETHER, "agentd", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    text = " ".join(done.stdout.split())
    assert "(default: None)" not in text
    assert "(default: False)" not in text
    for option in text.split(" --")[1:]:
        assert option.count("(default:") <= 1, option
    assert "mode 0700" in text
    stop = subprocess.run(
        [*TETHER, "stop", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "until the next start or send" in " ".join(stop.stdout.split())
    send = subprocess.run(
        [*TETHER, "send", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "(default: True)" not in send.stdout  # --no-wait's destination, not its default
    events = subprocess.run(
        [*TETHER, "events", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "(default: )" not in events.stdout
