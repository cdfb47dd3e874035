"""``make bench``'s summary (issue 43, row 8): a benchmark that fails is named in the summary
with its exit status and last error line, and every other one still runs and is summarized."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUMMARY = Path(__file__).parent.parent / "benchmarks" / "summary.py"


def test_a_failing_benchmark_is_named_and_the_others_still_run(tmp_path: Path) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nsys.exit('the daemon did not start')\n")
    working = tmp_path / "working.py"
    table = "| measure | tether / rival |\\n| --- | ---: |\\n| sends | 1.25x |"
    working.write_text(f"print('{table}')\n")
    done = subprocess.run(
        [sys.executable, str(SUMMARY), str(failing), str(working)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    summary = done.stdout.split("## Summary", 1)[1]
    assert "| failing | FAILED (exit 1): the daemon did not start | | |" in summary
    assert "| working | sends | tether / rival | 1.25x |" in summary
    assert "1 of 2 benchmarks failed: failing" in summary
