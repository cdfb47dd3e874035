"""`tether demo` runs as a real process and every guarantee it shows passes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import trio

from tether import Transcript


def test_the_demo_s_json_report_holds_every_guarantee() -> None:
    """The report's shape, on scenario 4 alone (the whole demo runs as the README prints it,
    in ``test_doc_blocks``, and from a fresh venv, in ``test_packaging``)."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", "demo", "--json", "--scenario", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    failed = [
        (scenario["number"], verdict)
        for scenario in report["scenarios"]
        for verdict in scenario["verdicts"]
        if not verdict["passed"]
    ]
    assert failed == [], failed
    assert done.returncode == 0
    assert [s["number"] for s in report["scenarios"]] == [4]
    assert sum(len(s["verdicts"]) for s in report["scenarios"]) == 4
    assert report["passed"] is True
    assert report["directory"] is None
    assert done.stderr == ""


def test_one_scenario_kept_leaves_its_files_for_a_look() -> None:
    done = _tether("demo", "--scenario", "3", "--keep")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3. a silent job (seed 003)" in done.stdout
    assert "1. SIGTERM" not in done.stdout
    assert "8 of 8 guarantees held" in done.stdout
    kept = Path(done.stdout.strip().splitlines()[-1].rpartition(": ")[2])
    try:
        assert (kept / "003" / "jobs.sqlite3").exists()
    finally:
        shutil.rmtree(kept)


def test_unknown_command_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "fly"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 64  # EX_USAGE
    assert "invalid choice: 'fly'" in done.stderr
    assert "Traceback" not in done.stderr


def _tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_transcript_show_and_repair(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    async with await Transcript.open(path) as tr:
        call = await tr.tool_call("bash", {"cmd": "make test"})
        done = await tr.tool_call("read", {"path": "README.md"})
        await tr.tool_result(done.id, "tether", "ok")
    with path.open("ab") as f:
        f.write(b'{"type":"mess')
    shown = _tether("transcript", "show", str(path))
    assert shown.returncode == 2
    assert f"[{call.id}]   <- DANGLING" in shown.stdout
    assert f"[{done.id}]   <- DANGLING" not in shown.stdout
    assert "13 bytes after entry 3 are unreadable (a torn last line of 13 bytes)" in shown.stdout
    repaired = _tether("transcript", "repair", str(path))
    assert repaired.returncode == 0
    assert "kept 3 entries; moved 13 bytes" in repaired.stdout
    assert "moved 13 bytes" not in repaired.stderr  # said once (issue 43, row 5)
    assert "1 tool calls have no result" in repaired.stdout
    again = _tether("transcript", "show", str(path))
    assert again.returncode == 0
    assert "event   quarantined" in again.stdout
    assert _tether("transcript", "repair", str(path)).stdout.endswith(
        "nothing to repair\n1 tool calls have no result; a resume seals them\n"
    )
    missing = _tether("transcript", "show", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 66  # EX_NOINPUT, on stderr (issue 30)
    assert "No such file" in missing.stderr
    assert missing.stdout == ""


AT_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'tether'; runpy.run_module('tether', run_name='__main__', alter_sys=True)"
)
"""``python -m tether`` with SIGINT raising ``KeyboardInterrupt``, as at a terminal: a shell's
background job starts its children with SIGINT ignored, and Python then keeps it so."""


async def test_transcript_show_json_and_tail_follow_a_live_one(tmp_path: Path) -> None:
    """Issue 28: ``show --json`` is one JSON array a program reads; ``tail -f`` follows a
    transcript while it is written (the file grows with each append) and ends on SIGINT."""
    path = tmp_path / "s.jsonl"
    async with await Transcript.open(path) as tr:
        first = await tr.tool_call("bash", {"cmd": "make test"})
        follower = subprocess.Popen(
            [sys.executable, "-c", AT_A_TERMINAL, "transcript", "tail", "-f", "--json", str(path)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert follower.stdout is not None
        stdout = follower.stdout
        readline = partial(trio.to_thread.run_sync, stdout.readline, abandon_on_cancel=True)
        try:
            with trio.fail_after(30):
                line = await readline()
            assert json.loads(line)["id"] == first.id  # the past entries first
            result = await tr.tool_result(first.id, "ok then", "ok")
            with trio.fail_after(30):
                line = await readline()
            assert (json.loads(line)["id"], json.loads(line)["status"]) == (result.id, "ok")
        finally:
            follower.send_signal(signal.SIGINT)
            try:
                code = await trio.to_thread.run_sync(partial(follower.wait, timeout=30))
            finally:
                follower.kill()  # a no-op once it has exited; a hang ends here, not the suite
                follower.wait()
                stdout.close()
        assert code == 0
        shown = _tether("transcript", "show", "--json", str(path))
    assert shown.returncode == 0
    assert [e["id"] for e in json.loads(shown.stdout)] == [first.id, result.id]


async def test_transcript_show_keeps_an_event_s_failure_whole(tmp_path: Path) -> None:
    """Issue 41, row 3: a model_error's kind and status were cut off behind its detail, and
    the detail at 60 characters; a partial reply's long text is still briefed."""
    path = tmp_path / "s.jsonl"
    async with await Transcript.open(path) as tr:
        detail = "the server said: " + "x" * 200 + " (the end)"
        await tr.event("model_error", {"prompt_id": "p1", "detail": detail, "failure": "http",
                                       "status": 429})  # fmt: skip
        await tr.event("partial_reply", {"prompt_id": "p1", "text": "y" * 500})
    shown = _tether("transcript", "show", str(path))
    (line,) = [line for line in shown.stdout.splitlines() if "model_error" in line]
    assert "prompt_id=p1 failure=http status=429 detail=the server said: xxx" in line
    assert line.endswith("x (the end)")
    (partial,) = [line for line in shown.stdout.splitlines() if "partial_reply" in line]
    assert partial.endswith("…")
    assert len(partial) < 200
