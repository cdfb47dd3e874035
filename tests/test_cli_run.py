"""``tether run`` with real processes: exit statuses pass through, signals reach CMD with their
sender logged, and nothing CMD started survives it, even across ``setsid``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio

from helpers import SIGINT_REPORTER, python, wait_until

RUN = [sys.executable, "-m", "tether", "run", "--grace", "0.3"]


@pytest.mark.parametrize("code", [0, 1, 42, 127, 255])
async def test_exit_codes_pass_through(code: int) -> None:
    done = await trio.run_process([*RUN, "--", "sh", "-c", f"exit {code}"], check=False)
    assert done.returncode == code


@pytest.mark.parametrize("signo", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR2])
async def test_death_by_signal_is_128_plus_signo(signo: int) -> None:
    done = await trio.run_process([*RUN, "--", "sh", "-c", f"kill -{signo} $$"], check=False)
    assert done.returncode == 128 + signo


async def test_a_setsid_grandchild_is_gone_after_cmd_exits(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; exit 0"
    done = await trio.run_process([*RUN, "--", "sh", "-c", script], check=False)
    assert done.returncode == 0
    grandchild = int(pidfile.read_text())
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie"


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


async def test_cmd_ignoring_sigterm_is_stopped_after_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = python(
        "import signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\nopen(sys.argv[1], 'w').close()\n"
        "signal.pause()",
        str(ready),
    )
    process = subprocess.Popen([*RUN, "--", *stubborn], stderr=subprocess.PIPE)
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
    assert b"still runs 0.3s after SIGTERM: stopping its tree" in err


async def test_a_missing_command_is_127_with_the_reason() -> None:
    done = await trio.run_process(
        [*RUN, "--", "/no/such/program"], check=False, capture_stderr=True
    )
    assert done.returncode == 127
    assert b"cannot execute '/no/such/program'" in done.stderr
