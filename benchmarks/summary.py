"""Run every benchmark in one go and print one summary table of ratios (tether / competitor).

Run with ``make bench`` (or ``python benchmarks/summary.py``). Each script runs in its own
process, prints its full tables (kept in the output above the summary), and the summary
collects every row that carries a ratio, with the date and the machine.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SCRIPTS = [
    "channels",
    "channels_extra",
    "process",
    "tools",
    "loops",
    "parity",
    "journal",
    "harness",
    "harness_loops",
    "mcp_clients",
    "agentd",
    "delivery",
    "flood",
    "liveness",
    "stores",
    "testing_overhead",
    "inspection",
    "model_stream",
    "sweep",
]


def ratio_rows(output: str) -> list[tuple[str, str, str]]:
    """``(measure, against, ratio)`` for every cell of every column whose header is a ratio
    (``tether/trio``, ``tether / bare``, ``median / trio close``, ``ratio``...)."""
    rows: list[tuple[str, str, str]] = []
    header: list[str] = []
    for line in output.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        label = cells[0]
        if header[0] in ("capacity", "producers"):
            label = f"{header[0]} {cells[0]}, {header[1]} {cells[1]}"
        for name, cell in zip(header, cells, strict=False):
            if ("/" in name or "ratio" in name) and re.fullmatch(r"\d+(\.\d+)?x?", cell):
                rows.append((label, name, cell.rstrip("x") + "x"))
    return rows


def main(scripts: list[str]) -> int:
    """Run each script, print its tables, then one summary of every ratio; a script that fails
    is named in the summary with its exit status and last error line, and the rest still run
    (exit 1 at the end)."""
    rows: list[tuple[str, str, str, str]] = []
    failed: list[tuple[str, int, str]] = []
    for name in scripts:  # a name in SCRIPTS, or a script's path
        path = Path(name) if name.endswith(".py") else HERE / f"{name}.py"
        script = path.stem
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
        print(done.stdout)
        rows += [(script, *row) for row in ratio_rows(done.stdout)]
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no error output)"])[-1]
            print(done.stderr, file=sys.stderr)
            failed.append((script, done.returncode, last))
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python "
    machine += platform.python_version()
    print(f"## Summary, {datetime.date.today().isoformat()}, {machine}\n")
    print("| benchmark | measure | column | ratio |")
    print("| --- | --- | --- | ---: |")
    for script, label, column, ratio in rows:
        print(f"| {script} | {label} | {column} | {ratio} |")
    for script, code, last in failed:
        print(f"| {script} | FAILED (exit {code}): {last.replace('|', '/')[:120]} | | |")
    if failed:
        names = ", ".join(script for script, _, _ in failed)
        print(f"\n{len(failed)} of {len(scripts)} benchmarks failed: {names}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--from"]:  # summarize saved output from stdin
        for row in ratio_rows(sys.stdin.read()):
            print("| " + " | ".join(row) + " |")
    else:
        raise SystemExit(main(sys.argv[1:] or SCRIPTS))
