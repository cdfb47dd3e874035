"""Issue 43: docs/getting-started.md's two terminals, run by bash as printed from the checkout
(its ``.venv`` activated by the page's own line), with a home and a runtime directory of the
test's own, so the page's ``~/.local/state`` path is the test's, not the user's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import descendants, gone_since, marked
from test_guide import wait_for

ROOT = Path(__file__).parent.parent
PAGE = ROOT / "docs" / "getting-started.md"


def test_the_getting_started_terminals_run_as_printed(tmp_path: Path) -> None:
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("the page activates the checkout's .venv (make test's)")
    daemon_lines, client_lines = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.DOTALL)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    skip = {"XDG_STATE_HOME", "TETHER_AGENTD", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(HOME=str(tmp_path / "home"), XDG_RUNTIME_DIR=str(run))
    before = descendants()
    out = tmp_path / "daemon.out"
    with out.open("wb") as sink:
        daemon = subprocess.Popen(
            ["bash", "-c", daemon_lines], cwd=ROOT, env=env, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        # The second terminal once the first says it serves, as a person would wait for it;
        # -e: every line of it must succeed.
        wait_for(lambda: " serving " in out.read_text(), timeout=60)
        done = subprocess.run(
            ["bash", "-e", "-c", client_lines], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        shown = done.stdout
        assert '"how": "spawned"' in shown
        assert re.search(r"^s1\s+attached\s+1\s", shown, re.MULTILINE), shown
        assert "open tool calls:\n  agent (call" in shown
        assert '{"session": "s1", "state": "stopped"}' in shown
        assert re.search(r"user\s+hello", shown), shown
        assert re.search(r"call\s+agent\(", shown), shown
        assert "0 dangling tool calls" in shown
        assert marked("s1") == []  # the harness, its agent and the agent's setsid sleep
        paths = out.read_text()
        assert f"socket      {run / 'tether' / 'agentd.sock'}" in paths
        assert f"state_dir   {tmp_path / 'home' / '.local' / 'state' / 'tether'}" in paths
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)  # Ctrl-C's like: the daemon stops, cleanly
        daemon.wait(30)
        wait_for(lambda: gone_since(before), timeout=30)
