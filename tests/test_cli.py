"""`tether demo` runs as a real process and every guarantee it shows passes."""

from __future__ import annotations

import subprocess
import sys


def test_demo_passes_and_says_what_is_not_built() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [
        line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert len(rows) == 12  # the header and eleven guarantees
    assert all("| PASS |" in row for row in rows[1:]), done.stdout
    assert "received SIGTERM from pid=" in done.stdout
    assert "Not built yet" in done.stdout
    assert "ResourceWarning" in done.stdout
    assert done.stderr == ""


def test_unknown_command_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "fly"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
