"""What tether.testing costs tether's own suite: the suite's time with the deadlock detector and
the leak guard off, with the detector only, and with both (as the suite runs), in one run.

Run with ``make bench`` (or ``python benchmarks/testing_overhead.py [pytest args]``). Each
configuration runs the whole suite once in a fresh pytest process, in pytest's own order, and
the table gives wall time and the ratio to the suite without the plugin's checks; the target
is under 1.10x. Run-to-run noise of the suite (Hypothesis, real processes) is several percent.
"""

from __future__ import annotations

import subprocess
import sys
import time

OFF = ["-o", "tether_deadlock=false", "-o", "tether_timeout=0", "-o", "tether_process_leaks=false"]
DETECTOR = ["-o", "tether_deadlock=true", "-o", "tether_timeout=120"]
CONFIGS = [
    ("without the plugin's checks", OFF),
    ("deadlock detector and timeout", [*OFF, *DETECTOR]),
    ("detector, timeout and leak guard (the suite's setting)", []),
]


def run(extra: list[str], args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    args = sys.argv[1:] or ["tests"]
    times = [(name, run(extra, args)) for name, extra in CONFIGS]
    base = times[0][1]
    print(f"tether's suite ({' '.join(args)}), one run per configuration\n")
    print("| configuration | wall time | ratio to the first |")
    print("| --- | --- | --- |")
    for name, seconds in times:
        print(f"| {name} | {seconds:.1f} s | {seconds / base:.3f}x |")


if __name__ == "__main__":
    main()
