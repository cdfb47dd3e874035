"""Where agentd keeps its state (issue 43, row 3): with nothing named, the durable state
(store, event log, transcripts) goes to ``$XDG_STATE_HOME/tether`` (else
``~/.local/state/tether``), which a reboot keeps, and the socket to ``$XDG_RUNTIME_DIR/tether``
(else ``/tmp/tether-<uid>``); a socket named by ``--socket`` or ``$TETHER_AGENTD`` keeps its
state beside it, as before. ``tether paths`` says where."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TETHER = [sys.executable, "-m", "tether"]


def clean_env(**extra: str) -> dict[str, str]:
    skip = {"TETHER_AGENTD", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "HOME"}
    return {**{k: v for k, v in os.environ.items() if k not in skip}, **extra}


def paths(env: dict[str, str], *args: str) -> dict[str, str]:
    done = subprocess.run(
        [*TETHER, "paths", "--json", *args], env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    shown: dict[str, str] = json.loads(done.stdout)
    return shown


def test_with_nothing_named_state_is_under_the_home_and_survives_tmp(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    shown = paths(clean_env(HOME=home))
    assert shown["state_dir"] == f"{home}/.local/state/tether"
    assert shown["store"] == f"{home}/.local/state/tether/epochs.sqlite3"
    assert shown["events"] == f"{home}/.local/state/tether/agentd.events.jsonl"
    assert shown["transcript"] == f"{home}/.local/state/tether/sessions/SESSION/SESSION.jsonl"
    assert shown["socket"] == f"/tmp/tether-{os.getuid()}/agentd.sock"


def test_xdg_directories_are_used_when_set(tmp_path: Path) -> None:
    env = clean_env(
        HOME="/nonexistent", XDG_STATE_HOME=f"{tmp_path}/s", XDG_RUNTIME_DIR=f"{tmp_path}/r"
    )
    shown = paths(env)
    assert shown["state_dir"] == f"{tmp_path}/s/tether"
    assert shown["socket"] == f"{tmp_path}/r/tether/agentd.sock"
    relative = clean_env(HOME="/h", XDG_STATE_HOME="rel", XDG_RUNTIME_DIR="rel")  # ignored
    assert paths(relative)["state_dir"] == "/h/.local/state/tether"


def test_a_named_socket_keeps_its_state_beside_it(tmp_path: Path) -> None:
    env = clean_env(HOME=str(tmp_path), TETHER_AGENTD=f"{tmp_path}/d/agentd.sock")
    assert paths(env)["state_dir"] == f"{tmp_path}/d"
    named = paths(clean_env(HOME=str(tmp_path)), "--socket", f"{tmp_path}/e/a.sock")
    assert named["store"] == f"{tmp_path}/e/epochs.sqlite3"
    chosen = paths(env, "--state-dir", f"{tmp_path}/f", "--store", "sqlite:/x.db")
    assert (chosen["state_dir"], chosen["store"]) == (f"{tmp_path}/f", "sqlite:/x.db")


def test_a_daemon_with_nothing_named_writes_where_paths_says(tmp_path: Path) -> None:
    """A real daemon and harness: the transcript, store and event log are under the state
    home, the socket in the runtime directory, and nothing is written beside the socket."""
    tmp_path.chmod(0o700)
    env = clean_env(
        HOME=str(tmp_path / "home"), XDG_RUNTIME_DIR=str(tmp_path / "run"), TETHER_GRACE="0.2"
    )
    shown = paths(env)
    log = (tmp_path / "agentd.log").open("wb")
    daemon = subprocess.Popen(
        [*TETHER, "agentd", "--heartbeat", "0.2", "--grace", "0.2", "--stop-harnesses"],
        env=env, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not Path(shown["socket"]).exists():  # bounded polling for the daemon to listen
            assert daemon.poll() is None, "agentd exited"
            assert time.monotonic() < deadline, "agentd did not listen"
            time.sleep(0.02)
        sent = subprocess.run(
            [*TETHER, "send", "s1", "kept across a reboot", "--create"], env=env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        log.close()
    transcript = Path(shown["transcript"].replace("SESSION", "s1"))
    assert "kept across a reboot" in transcript.read_text()
    assert Path(shown["store"]).is_file()
    assert Path(shown["events"]).is_file()
    assert sorted(p.name for p in Path(shown["socket"]).parent.iterdir()) == []  # socket gone
