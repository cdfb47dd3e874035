"""``tether run`` with real processes, held to what tini's and dumb-init's own suites check
(each test names the one it mirrors): exit statuses pass through, every signal reaches CMD
with its sender logged, job control works, orphans are reaped, a terminal is handed over, the
signal configuration is inherited, and nothing CMD started survives it, or ``tether run``
itself being killed."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from helpers import (
    SIGINT_REPORTER,
    alive,
    python,
    reap_zombie_children,
    sleepers,
    wait_until,
)

RUN = [sys.executable, "-m", "tether", "run", "--grace", "0.3"]


@pytest.fixture(autouse=True)
def reap_watchers(no_process_leaks: None) -> Iterator[None]:
    """``tether run``'s watcher is detached, so it ends as an orphan of the nearest subreaper:
    this test process, which reaps it as init would (after the test, before the leak check)."""
    before = {child.pid for child in psutil.Process().children()}
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        reap_zombie_children()
        new = [child for child in psutil.Process().children() if child.pid not in before]
        if not new:
            return
        time.sleep(0.01)


# -- exit statuses (tini: 0-255 and -e; dumb-init: exit_status_test) --------------------------


@pytest.mark.parametrize("code", [0, 1, 2, 42, 126, 127, 128, 254, 255])
async def test_exit_codes_pass_through(code: int) -> None:
    done = await trio.run_process([*RUN, "--", "sh", "-c", f"exit {code}"], check=False)
    assert done.returncode == code


async def test_an_exit_code_can_be_remapped_to_zero() -> None:
    done = await trio.run_process([*RUN, "-e", "3", "-e", "4", "sh", "-c", "exit 4"], check=False)
    assert done.returncode == 0
    done = await trio.run_process([*RUN, "-e", "3", "sh", "-c", "exit 5"], check=False)
    assert done.returncode == 5


@pytest.mark.parametrize(
    "signo", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT]
)
async def test_death_by_signal_is_128_plus_signo(signo: int) -> None:
    killer = f"import os; os.kill(os.getpid(), {int(signo)})"
    done = await trio.run_process([*RUN, "--", sys.executable, "-c", killer], check=False)
    assert done.returncode == 128 + signo


async def test_a_missing_command_is_127_with_the_reason() -> None:
    done = await trio.run_process(
        [*RUN, "--", "/no/such/program"], check=False, capture_stderr=True
    )
    assert done.returncode == 127
    assert b"cannot execute '/no/such/program': No such file or directory" in done.stderr


async def test_a_command_that_cannot_be_executed_is_126(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    for target in (str(script), str(tmp_path)):
        done = await trio.run_process([*RUN, "--", target], check=False, capture_stderr=True)
        assert done.returncode == 126
        assert b"Permission denied" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--yolo", "true"],
        [],
        ["-r"],
        ["-r", "herp:derp", "true"],
        ["-r", "15", "true"],
        ["-r", "15::12", "true"],
        ["-r", "15:99", "true"],
        ["-r", "0:15", "true"],
        ["-p", "77", "true"],
        ["--grace", "-1", "true"],
        ["--stop-timeout", "-1", "true"],
        ["-e", "abc", "true"],
        ["-e", "256", "true"],
    ],
    ids=repr,
)
async def test_a_bad_command_line_is_refused_with_usage_and_runs_nothing(args: list[str]) -> None:
    """dumb-init's cli_test: a bad option or a rewrite that names no signal is an error (64,
    EX_USAGE, with the usage), and nothing is started."""
    done = await trio.run_process(
        [sys.executable, "-m", "tether", "run", *args], check=False, capture_stderr=True
    )
    assert done.returncode == 64
    assert b"usage: tether run" in done.stderr


# -- signals (tini: signals test; dumb-init: proxies_signals_test) ----------------------------

CATCHER = """
    import os, signal, sys, time
    caught = []
    for n in set(range(1, 65)) - {9, 19, 32, 33}:
        try:
            signal.signal(n, lambda n, _: caught.append(n))
        except (OSError, ValueError):
            pass
    print(f"ready (pid: {os.getpid()})", flush=True)
    while True:
        while caught:
            print(caught.pop(0), flush=True)
        time.sleep(0.005)
"""
UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}
SUSPENDING = {signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
FORWARDED = [
    *sorted(set(range(1, 32)) - UNCATCHABLE - SUSPENDING),
    signal.SIGRTMIN,
    signal.SIGRTMAX,
]


def catcher(*options: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [*RUN[:-2], "--grace", "30", *options, "--", *python(CATCHER)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert re.match(rb"ready \(pid: \d+\)\n", line), line
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill CMD's tree; ``tether run`` then exits on its own (and tells its watcher)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def test_every_catchable_signal_reaches_cmd() -> None:
    """Every signal 1-31 but the uncatchable and job control (which has its own test), and the
    real-time ones, arrives at CMD, in order, and CMD goes on running."""
    process = catcher()
    try:
        assert process.stdout is not None
        for signo in FORWARDED:
            process.send_signal(signo)
            assert process.stdout.readline() == f"{int(signo)}\n".encode()
        assert process.poll() is None
    finally:
        stop(process)


@pytest.mark.parametrize(
    ("rewrite", "sent", "expected"),
    [
        (["-r", "15:2"], [15, 3, 18, 2], [2, 3, 18, 2]),
        (["-r", "15:2", "-r", "2:15", "--rewrite", "SIGQUIT:SIGQUIT"], [15, 3, 2], [2, 3, 15]),
        (["-r", "1:31", "-r", "31:1"], [1, 31], [31, 1]),
    ],
)
def test_signals_can_be_rewritten(rewrite: list[str], sent: list[int], expected: list[int]) -> None:
    """dumb-init's ``--rewrite``: S arrives, D is forwarded."""
    process = catcher(*rewrite)
    try:
        assert process.stdout is not None
        for send, want in zip(sent, expected, strict=True):
            process.send_signal(send)
            assert process.stdout.readline() == f"{want}\n".encode()
    finally:
        stop(process)


def test_a_signal_rewritten_to_zero_is_dropped() -> None:
    process = catcher("-r", "15:3", "-r", "2:0", "-r", "28:0")
    try:
        assert process.stdout is not None
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline() == b"3\n"
        process.send_signal(signal.SIGWINCH)
        process.send_signal(signal.SIGHUP)
        assert process.stdout.readline() == b"1\n"
    finally:
        stop(process)


@pytest.mark.parametrize(
    "signo", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1], ids=lambda s: s.name
)
async def test_a_signal_reaches_cmd_and_names_the_sender(
    tmp_path: Path, signo: signal.Signals
) -> None:
    report, log = tmp_path / "report", tmp_path / "run.log"
    reporter = python(SIGINT_REPORTER.replace("SIGINT", signo.name), str(report), signo.name)
    process = subprocess.Popen([*RUN, "--log", str(log), "--", *reporter])
    try:
        await wait_until(lambda: Path(str(report) + ".ready").exists())
        os.kill(process.pid, signo)
        with trio.fail_after(10):
            while process.poll() is None:
                await trio.sleep(0.01)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert process.returncode == 0  # CMD handled the signal and exited 0
    assert report.read_text() == signo.name
    text = log.read_text()
    assert f"received {signo.name} from pid={os.getpid()}" in text
    assert f"forwarded {signo.name} to pid" in text


async def test_it_is_quiet_by_default_and_says_more_with_v(tmp_path: Path) -> None:
    quiet = await trio.run_process([*RUN, "--", "true"], capture_stderr=True)
    assert quiet.stderr == b""
    loud = await trio.run_process([*RUN, "-v", "--", "true"], capture_stderr=True)
    assert b"tether run: started true as pid" in loud.stderr


async def test_cmd_takes_the_time_it_needs_to_obey_sigterm(tmp_path: Path) -> None:
    """Issue 29: a command whose SIGTERM handler takes 1.5 s (five times ``--grace``) exits 0
    as it chooses, as under tini and dumb-init: ``--grace`` is for what it leaves."""
    ready = tmp_path / "ready"
    slow = python(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(0)))\n"
        "open(sys.argv[1], 'w').close()\nsignal.pause()",
        str(ready),
    )
    process = subprocess.Popen([*RUN, "--", *slow], stderr=subprocess.PIPE)
    try:
        await wait_until(ready.exists)
        started = time.monotonic()
        os.kill(process.pid, signal.SIGTERM)
        with trio.fail_after(30):
            while process.poll() is None:
                await trio.sleep(0.01)
        took = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate()
    assert process.returncode == 0, err
    assert took >= 1.5
    assert b"still runs" not in err


async def test_cmd_ignoring_sigterm_is_stopped_after_its_stop_timeout(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = python(
        "import signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\nopen(sys.argv[1], 'w').close()\n"
        "signal.pause()",
        str(ready),
    )
    process = subprocess.Popen(
        [*RUN, "--stop-timeout", "0.3", "--", *stubborn], stderr=subprocess.PIPE
    )
    try:
        await wait_until(ready.exists)
        os.kill(process.pid, signal.SIGTERM)
        with trio.fail_after(10):
            while process.poll() is None:
                await trio.sleep(0.01)
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate()
    assert process.returncode == 128 + signal.SIGKILL
    assert b"still runs 0.3s after SIGTERM (--stop-timeout): stopping its tree" in err


# -- process groups (tini: pgroup test with -g) ------------------------------------------------

PGROUP = """
    import signal, subprocess
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    subprocess.Popen(["sleep", "1000"], restore_signals=True,
                     preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_DFL)).wait()
"""


@pytest.mark.parametrize("how", ["-g", "TINI_KILL_PROCESS_GROUP"])
async def test_with_group_a_signal_reaches_cmd_s_whole_process_group(how: str) -> None:
    """CMD ignores SIGUSR1 and waits for a sleep that does not: with ``-g`` (or tini's
    variable for it) the sleep dies, then CMD, then ``tether run``."""
    flags, env = ([how], os.environ) if how == "-g" else ([], {**os.environ, how: "1"})
    process = subprocess.Popen([*RUN, *flags, "--", *python(PGROUP)], env=env)
    try:
        # Until the sleep has exec'd, it is a fork of CMD that still ignores SIGUSR1.
        await wait_until(lambda: _sleep_runs_under(process.pid))
        process.send_signal(signal.SIGUSR1)
        await wait_until(lambda: process.poll() is not None)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            stop(process)


def _sleep_runs_under(pid: int) -> bool:
    try:
        return any(
            child.cmdline()[:1] == ["sleep"]
            for child in psutil.Process(pid).children(recursive=True)
        )
    except psutil.Error:
        return False


# -- job control without a terminal (dumb-init: shell_background_test) -------------------------


@pytest.mark.parametrize("signo", [signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU])
def test_a_suspend_signal_reaches_cmd_and_suspends_tether_run(signo: int) -> None:
    process = catcher()
    try:
        assert process.stdout is not None
        process.send_signal(signo)
        assert process.stdout.readline() == f"{int(signo)}\n".encode()
        os.waitpid(process.pid, os.WUNTRACED)
        assert psutil.Process(process.pid).status() == psutil.STATUS_STOPPED
        process.send_signal(signal.SIGCONT)
        assert process.stdout.readline() == f"{int(signal.SIGCONT)}\n".encode()
        assert psutil.Process(process.pid).status() != psutil.STATUS_STOPPED
    finally:
        stop(process)


def test_a_rewritten_suspend_signal_is_forwarded_rewritten_and_still_suspends() -> None:
    """dumb-init's rewrite of TSTP/TTIN/TTOU: D reaches CMD, and S still suspends the wrapper."""
    process = catcher("-r", "21:15", "-r", "20:1")
    try:
        assert process.stdout is not None
        for send, want in ((signal.SIGTTIN, signal.SIGTERM), (signal.SIGTSTP, signal.SIGHUP)):
            process.send_signal(send)
            assert process.stdout.readline() == f"{int(want)}\n".encode()
            os.waitpid(process.pid, os.WUNTRACED)
            assert psutil.Process(process.pid).status() == psutil.STATUS_STOPPED
            process.send_signal(signal.SIGCONT)
            assert process.stdout.readline() == f"{int(signal.SIGCONT)}\n".encode()
    finally:
        stop(process)


# -- orphans (tini: reaping test) --------------------------------------------------------------

ORPHANS = """
    import os, subprocess, sys, time, psutil
    spawn = "import subprocess\\nfor i in range(100): subprocess.Popen(['sleep', '0.3'])"
    subprocess.Popen([sys.executable, "-c", spawn]).wait()
    me, init = psutil.Process(), psutil.Process().parent()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [p for p in init.children(recursive=True) if p.pid != me.pid]
        if not left:
            sys.exit(0)
        time.sleep(0.05)
    sys.exit(1)
"""


SUBREAPER_PROXY = """
    import ctypes, os, sys
    assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.parametrize("proxy", [False, True], ids=["plain", "already-a-subreaper"])
async def test_a_hundred_orphans_are_reaped(proxy: bool) -> None:
    """CMD's child starts 100 sleepers and exits: they are orphans of ``tether run``, which
    reaps every one, so CMD sees ``tether run`` with no child but itself. Also when
    ``tether run`` is exec'd by a process that made itself a subreaper (tini's
    subreaper-proxy): its watcher still is nobody's child there."""
    via = python(SUBREAPER_PROXY, RUN[0]) if proxy else RUN[:1]
    done = await trio.run_process([*via, *RUN[1:], "--", *python(ORPHANS)], check=False)
    assert done.returncode == 0


async def test_a_setsid_grandchild_is_gone_after_cmd_exits(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; exit 0"
    done = await trio.run_process([*RUN, "--", "sh", "-c", script], check=False)
    assert done.returncode == 0
    grandchild = int(pidfile.read_text())
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie"


async def test_leftovers_get_sigterm_before_sigkill(tmp_path: Path) -> None:
    """Unlike dumb-init without ``--setsid``, which leaves them running: what CMD leaves gets
    SIGTERM (what such processes expect), and SIGKILL only after ``--grace``."""
    said = tmp_path / "said"
    leftover = textwrap.dedent(SIGINT_REPORTER).replace("SIGINT", "SIGTERM")
    script = f"{sys.executable} -c '{leftover}' {said} 'got SIGTERM' & sleep 0.5; exit 0"
    done = await trio.run_process([*RUN, "--", "sh", "-c", script], check=False)
    assert done.returncode == 0
    assert said.read_text() == "got SIGTERM"


RECORDER = """
    import os, signal, sys, time
    got = []
    def record(signo, _):
        got.append(signo)
    for signo in (signal.SIGTERM, signal.SIGCONT, signal.SIGHUP, signal.SIGINT):
        signal.signal(signo, record)
    open(sys.argv[1] + ".ready", "w").close()
    if sys.argv[2] == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    while signal.SIGTERM not in got:
        time.sleep(0.01)
    time.sleep(0.2)  # for any signal sent with it
    open(sys.argv[1], "w").write(" ".join(map(str, got)))
"""


@pytest.mark.parametrize("how", ["run", "stop"])
async def test_a_leftover_gets_sigterm_alone_and_a_stopped_one_is_woken_to_obey(
    tmp_path: Path, how: str
) -> None:
    """dumb-init's SIGTERM to what is left, and nothing else; a stopped leftover also gets
    SIGCONT after it (systemd's order), so it can obey."""
    said = tmp_path / "said"
    recorder = shlex.join(python(RECORDER, str(said), how))
    settled = "grep -q '^State:.*T' /proc/$!/status" if how == "stop" else f"[ -e {said}.ready ]"
    script = f"{recorder} & until {settled}; do sleep 0.01; done; exit 0"
    done = await trio.run_process([*RUN, "--", "sh", "-c", script], check=False)
    assert done.returncode == 0
    woken = [signal.SIGCONT] if how == "stop" else []
    assert said.read_text().split() == [str(int(s)) for s in [signal.SIGTERM, *woken]]


# -- the working directory (dumb-init: cwd_test) ------------------------------------------------


async def test_cmd_starts_where_tether_run_did_and_tether_run_moves_to_root(
    tmp_path: Path,
) -> None:
    # tether run moved after CMD started: 16 of 200 runs saw it still in the caller's
    # directory, so the check is repeated, 4 at a time (the race is likelier under load).
    async def once() -> None:
        done = await trio.run_process(
            [*RUN, "--", "sh", "-c", "readlink /proc/$PPID/cwd && readlink /proc/$$/cwd"],
            cwd=tmp_path,
            capture_stdout=True,
        )
        assert done.stdout.decode().split() == ["/", str(tmp_path)]

    for _ in range(10):
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(once)


async def test_cmd_runs_in_a_deleted_directory_it_was_started_in(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    done = await trio.run_process(
        ["sh", "-c", f'cd {gone} && rmdir {gone} && exec "$@"', "sh", *RUN, "--", "true"],
        check=False,
    )
    assert done.returncode == 0


# -- inherited signal configuration (tini: sigconf test) ---------------------------------------

SIGCONF = """
    import os, signal, sys
    for sig in (signal.SIGTTOU, signal.SIGSEGV, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTTIN, signal.SIGILL, signal.SIGTERM])
    os.execvp(sys.argv[1], sys.argv[1:])
"""


def _sigsets(status: str) -> dict[str, set[int]]:
    sets = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn"):
            bits = int(value.strip(), 16)
            sets[key] = {n for n in range(1, 65) if bits & (1 << (n - 1))}
    return sets


async def test_cmd_inherits_the_ignored_and_blocked_signals_tether_run_got() -> None:
    done = await trio.run_process(
        python(SIGCONF, *RUN, "--", "cat", "/proc/self/status"), capture_stdout=True
    )
    sets = _sigsets(done.stdout.decode())
    assert {signal.SIGTTOU, signal.SIGSEGV, signal.SIGINT} <= sets["SigIgn"]
    assert {signal.SIGTTIN, signal.SIGILL, signal.SIGTERM} <= sets["SigBlk"]
    assert signal.SIGPIPE not in sets["SigIgn"], "the interpreter's own SIGPIPE leaked"
    reset = await trio.run_process(
        python(SIGCONF, *RUN, "--reset-signals", "--", "cat", "/proc/self/status"),
        capture_stdout=True,
    )
    # glibc reserves 32 and 33 (threads' cancel and setxid): an ignored one set by whatever
    # started this suite cannot be changed from Python, nor from tini.
    reserved = set(range(1, 65)) - set(signal.valid_signals())
    cleared = _sigsets(reset.stdout.decode())
    assert cleared["SigBlk"] == set()
    assert cleared["SigIgn"] <= reserved


# -- the parent's death (tini: pdeathsignal test) ----------------------------------------------

LAUNCHER = """
    import os, subprocess, sys
    subprocess.Popen([*sys.argv[1:], str(os.getpid())]).wait()
"""
PDEATH_CHILD = """
    import os, signal, sys, time
    def bye(*_):
        open(sys.argv[1], "w").write("ok")
        sys.exit(0)
    signal.signal(signal.SIGUSR1, bye)
    os.kill(int(sys.argv[2]), signal.SIGKILL)  # the launcher: tether run's parent
    time.sleep(10)
"""


async def test_the_parent_s_death_signal_is_forwarded(tmp_path: Path) -> None:
    """``-p SIGUSR1``: ``tether run`` gets SIGUSR1 when its parent dies, and forwards it."""
    out = tmp_path / "out"
    child = python(PDEATH_CHILD, str(out))
    launcher = subprocess.Popen(python(LAUNCHER, *RUN, "-p", "SIGUSR1", "--", *child))
    launcher.wait(timeout=20)
    assert launcher.returncode == -signal.SIGKILL
    await wait_until(lambda: out.exists() and out.read_text() == "ok", timeout=20)


# -- a terminal (dumb-init: tty_test) ----------------------------------------------------------


class Terminal:
    """A program on a new pseudo-terminal (its session leader), driven like ``expect``."""

    def __init__(self, argv: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - the child
            os.execvp(argv[0], argv)
        self.output = b""

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def expect(self, pattern: bytes, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.output.replace(b"\r", b"")) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} never came; got {self.output!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"the terminal closed before {pattern!r}; got {self.output!r}"
                self.output += chunk

    def wait(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            assert time.monotonic() < deadline, f"still running; got {self.output!r}"
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):
                    self.output += os.read(self.fd, 4096)


def test_cmd_writes_to_the_terminal() -> None:
    terminal = Terminal([*RUN, "--", "tac"])
    terminal.send(b"1\n2\n3\n")
    terminal.send(b"\x04\x04")
    assert terminal.wait() == 0
    assert terminal.output.replace(b"\r", b"").endswith(b"3\n2\n1\n"), terminal.output


def test_cmd_gets_the_terminal_and_an_interactive_shell_has_job_control() -> None:
    terminal = Terminal([*RUN, "--", "bash", "--norc", "--noprofile", "-m", "-i"])
    terminal.send(b'echo "flags are: [[$-]]"\n')
    terminal.expect(rb"flags are: \[\[[a-zA-Z]+\]\]\n")
    terminal.send(b"exit 0\n")
    assert terminal.wait() == 0
    flags = re.search(rb"flags are: \[\[([a-zA-Z]+)\]\]", terminal.output)
    assert flags is not None
    assert b"m" in flags.group(1)


def test_ctrl_z_suspends_cmd_and_fg_resumes_it() -> None:
    """Under an interactive shell on a terminal: ^Z stops CMD and ``tether run`` (the shell
    says Stopped and takes the terminal back); ``fg`` gives it back and CMD goes on."""
    terminal = Terminal(["bash", "--norc", "--noprofile", "-i"])
    terminal.send(b"PS1='$ '\n")
    terminal.expect(rb"\$ $")
    terminal.send(" ".join([*RUN, "-v", "--", "cat"]).encode() + b"\n")
    terminal.expect(rb"started cat as pid")
    terminal.send(b"one\n")
    terminal.expect(rb"one\none\n")  # the terminal's echo, then cat's: cat has it
    terminal.send(b"\x1a")  # ^Z
    terminal.expect(rb"Stopped")
    terminal.send(b"echo status:$?\n")
    terminal.expect(rb"status:148")  # 128 + SIGTSTP: the shell saw its job stop
    terminal.send(b"fg\n")
    terminal.expect(rb"forwarded SIGCONT")
    terminal.send(b"two\n")
    terminal.expect(rb"two\ntwo\n")  # cat reads the terminal again
    terminal.send(b"\x04")  # ^D: cat ends, and tether run with it
    terminal.send(b"echo done:$?\n")
    terminal.expect(rb"done:0")
    terminal.send(b"exit 0\n")
    assert terminal.wait() == 0


# -- start-up and the death of tether run itself ------------------------------------------------


async def test_tether_run_imports_no_trio() -> None:
    done = await trio.run_process(
        [sys.executable, "-X", "importtime", "-m", "tether", "run", "--", "true"],
        capture_stderr=True,
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "trio" not in modules
    assert "tether.process" not in modules


TREE = """
    sleep 1000 & setsid sleep 1001 & setsid sh -c 'sleep 1002 &' &
    nohup sleep 1003 >/dev/null 2>&1 &
    env -i /usr/bin/setsid /bin/sleep 1004 &
    echo ready > "$0"; wait
"""


TREE_SLEEPS = {"1000", "1001", "1002", "1003", "1004"}


async def test_a_killed_tether_run_leaves_no_survivor(tmp_path: Path) -> None:
    """``tether run`` is SIGKILLed (nothing of its own can run): its watcher stops all six,
    the one with a scrubbed environment and its own session included."""
    ready = tmp_path / "ready"
    process = subprocess.Popen([*RUN, "--", "bash", "-c", textwrap.dedent(TREE), str(ready)])
    try:
        await wait_until(ready.exists)
        await wait_until(lambda: len(sleepers(TREE_SLEEPS)) == 5)
        await trio.sleep(0.2)  # the watcher learns of orphans as they come (ADR 0023)
        found = sleepers(TREE_SLEEPS)
        process.kill()
        process.wait()
        await wait_until(lambda: not any(map(alive, found)), timeout=2 * 0.3 + 1 + 3)
    finally:
        for sleeper in sleepers(TREE_SLEEPS):
            sleeper.kill()


# -- as PID 1 of a pid namespace (tini's reason to exist) --------------------------------------


def _namespaces_allowed() -> bool:
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


PID1_CMD = """
    import os, signal, sys
    signal.signal(signal.SIGUSR1, lambda *_: open(sys.argv[1] + "/usr1", "w").write("got it"))
    open(sys.argv[1] + "/pid", "w").write(str(os.getpid()))
    while True:
        signal.pause()
"""
ORPHANS_50 = "for i in $(seq 50); do sh -c 'sleep 0.05 &'; done"


@pytest.mark.skipif(not _namespaces_allowed(), reason="no pid namespaces here (needs root)")
async def test_as_pid_1_it_forwards_signals_and_reaps_every_orphan(tmp_path: Path) -> None:
    """PID 1 gets no default action for a signal it has no handler for; ``tether run``
    forwards it anyway. And it reaps the orphans of a process that entered the namespace from
    outside (``nsenter``), which were never its descendants."""
    init = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *RUN, "--", *python(PID1_CMD, str(tmp_path))]
    )
    try:
        pid = tmp_path / "pid"
        await wait_until(lambda: pid.exists() and pid.read_text() != "")  # written, not begun
        assert pid.read_text() == "2"  # CMD, under tether run as PID 1
        (run,) = psutil.Process(init.pid).children()
        os.kill(run.pid, signal.SIGUSR1)
        await wait_until(lambda: (tmp_path / "usr1").exists())
        entered = await trio.run_process(
            ["nsenter", "-t", str(run.pid), "-p", "-m", "sh", "-c", ORPHANS_50], check=False
        )
        assert entered.returncode == 0

        def no_zombies() -> bool:
            return all(child.status() != psutil.STATUS_ZOMBIE for child in run.children())

        await wait_until(lambda: len(run.children()) == 1 and no_zombies(), timeout=20)
        os.kill(run.pid, signal.SIGTERM)
        assert init.wait(timeout=20) == 128 + signal.SIGTERM  # forwarded, and CMD died of it
    finally:
        if init.poll() is None:
            init.kill()
            init.wait()
