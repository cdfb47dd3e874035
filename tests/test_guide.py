"""The guide's 40-line harness runs as it is, under a real daemon, and its daemon walk-through
runs as printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from helpers import descendants, gone_since, new_descendants, wait_until
from tether import Agentd, SqliteEpochStore

GUIDE = Path(__file__).parent.parent / "docs" / "guide.md"


async def test_the_guide_s_engine_answers_a_prompt(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)[0]
    assert len(code.splitlines()) <= 45
    engine = tmp_path / "engine.py"
    engine.write_text(code)
    tmp_path.chmod(0o700)
    async with SqliteEpochStore(tmp_path / "epochs.sqlite3") as store:
        agentd = Agentd(store, tmp_path / "agentd.sock", [sys.executable, str(engine)], grace=0.3)
        async with agentd.running(stop_harnesses=True):
            delivered = await agentd.deliver("guide", "fix the tests")
            transcript = tmp_path / "sessions" / "guide" / "guide.jsonl"
            await wait_until(lambda: "agent exited 0" in transcript.read_text())
    assert delivered.attempts == 1
    assert (
        "engine up: session guide epoch 1"
        in (tmp_path / "sessions" / "guide" / "harness.log").read_text()
    )


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds or ``timeout`` passes (a sync test's clean-up)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_guide_s_daemon_walk_through_runs_as_printed(tmp_path: Path) -> None:
    """Issue 30: the shell block of "Running the daemon", run by bash exactly as printed (the
    daemon in the background, ``tether start`` at once: the client waits for a daemon that
    is starting), in a directory holding the guide's ``engine.py``."""
    text = GUIDE.read_text()
    (block,) = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    (tmp_path / "engine.py").write_text(re.findall(r"```python\n(.*?)```", text, re.DOTALL)[0])
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    socket = run / "agentd.sock"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TETHER_AGENTD": str(socket),
    }
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    before = descendants()
    try:
        # Files, not pipes: the daemon in the background keeps them open after bash exits.
        with out.open("wb") as stdout, err.open("wb") as stderr:
            done = subprocess.run(
                ["bash", "-c", block], cwd=tmp_path, env=env, stdout=stdout, stderr=stderr,
                timeout=120, check=False,
            )  # fmt: skip
        assert done.returncode == 0, err.read_text()
        started, sent, *table = out.read_text().splitlines()
        assert json.loads(started)["how"] == "spawned"
        assert json.loads(sent)["attempts"] == 1
        assert table[0].split()[:3] == ["SESSION", "STATE", "EPOCH"]
        assert table[1].split()[:3] == ["s1", "attached", "1"]
    finally:
        for process in new_descendants(before):
            try:
                if "agentd" in process.cmdline():
                    process.terminate()  # it leaves its harnesses running, as the guide says
                    process.wait(30)
            except psutil.Error:
                continue
        wait_for(lambda: gone_since(before), timeout=30)
