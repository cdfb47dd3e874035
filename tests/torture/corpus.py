"""The deadlock plugin's corpus (issue 42): every program the suite's detector tests write,
split into one test each and judged alone in a child pytest, under the plugin with a 20 s
timeout. A program a source expects to deadlock must be named (``Deadlock``, not a timeout);
every other must pass. A false alarm or a miss is printed with its program's name.

``python tests/torture/corpus.py --runs 3`` runs it; ``make torture`` runs it three times and
``tests/test_testing_corpus.py`` once (slow tier).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import enum
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import test_testing_deadlocks as deadlocks  # noqa: E402
import test_testing_no_side_effects as side_effects  # noqa: E402
import test_testing_plugin as plugin  # noqa: E402
import test_testing_reports as reports  # noqa: E402
import test_testing_soundness as soundness  # noqa: E402
import test_testing_threads as threads  # noqa: E402

INI = """[pytest]
trio_mode = true
tether_deadlock = true
tether_deadlock_cushion = {cushion}
tether_timeout = 20
"""


class Expect(enum.Enum):
    """What a program must do under the plugin."""

    NAMED = "named"
    PASSES = "passes"


class Verdict(enum.Enum):
    """What it did."""

    NAMED = "named"
    PASSED = "passed"
    TIMED_OUT = "timed out"
    FAILED = "failed otherwise"


Rule = Callable[[str], Expect]


def _all(expect: Expect) -> Rule:
    return lambda name: expect


def _ok_prefix(name: str) -> Expect:
    return Expect.PASSES if name.startswith("test_ok_") else Expect.NAMED


SOURCES: list[tuple[str, str, Rule, dict[str, str]]] = [
    ("deadlocks", deadlocks.DEADLOCKS, _all(Expect.NAMED), {}),
    ("woken-from-outside", deadlocks.FALSE_ALARMS, _all(Expect.PASSES), {}),
    ("threads", threads.DEAD, _all(Expect.NAMED), {}),
    ("threads-working", threads.WORKING, _all(Expect.PASSES), {"helper.py": threads.HELPER}),
    ("reports", reports.PROGRAMS, _ok_prefix, {}),
    ("anyio-streams", reports.ANYIO_STREAMS, _ok_prefix, {}),
    ("system-tasks", reports.SYSTEM_TASKS, _ok_prefix, {}),
    ("clone-dropped", side_effects.CLONE_DROPPED, _all(Expect.PASSES), {}),
    ("in-a-cycle", side_effects.IN_A_CYCLE, _all(Expect.PASSES), {}),
    ("permit-dropped", side_effects.PERMIT_DROPPED, _all(Expect.PASSES), {}),
    ("stray-clones", side_effects.TRUE_DEADLOCKS, _all(Expect.NAMED), {}),
    ("parked", soundness.PARKED, _all(Expect.NAMED), {}),
    ("seed", plugin.SEED, _all(Expect.NAMED), {}),
    ("healthy", plugin.HEALTHY, _all(Expect.PASSES), {}),
]


def programs() -> list[tuple[str, str, str, Expect, dict[str, str]]]:
    """``(source name, test name, source, expectation, extra files)`` of every program."""
    found = []
    for label, source, rule, files in SOURCES:
        for name in re.findall(r"^(?:async )?def (test_\w+)", source, re.MULTILINE):
            found.append((label, name, source, rule(name), files))
    return found


def judge(
    label: str, name: str, source: str, files: dict[str, str], cushion: float, root: Path
) -> tuple[Verdict, float, str]:
    """Run one program alone in a child pytest: its verdict, the seconds of its call (pytest's
    own measure, without the child's start), and its output."""
    directory = root / f"{label}-{name}"
    directory.mkdir()
    (directory / "pytest.ini").write_text(INI.format(cushion=cushion))
    (directory / "test_it.py").write_text(source)
    for path, text in files.items():
        (directory / path).write_text(text)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-p", "anyio", "--durations=1", "--durations-min=0", f"test_it.py::{name}"],
        cwd=directory, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout
    call = re.search(r"^([\d.]+)s call ", out, re.MULTILINE)  # the test's own time
    seconds = float(call.group(1)) if call else time.monotonic() - started
    if "tether.testing.Deadlock" in out or "Deadlock: " in out:
        verdict = Verdict.NAMED
    elif "TimedOut" in out:
        verdict = Verdict.TIMED_OUT
    elif done.returncode == 0 and re.search(r"\b1 passed\b", out):
        verdict = Verdict.PASSED
    else:
        verdict = Verdict.FAILED
    return verdict, seconds, out[-3000:] + done.stderr[-1000:]


def run(runs: int, cushion: float, workers: int = 2) -> int:
    """Judge every program ``runs`` times; print each wrong verdict and a summary; 0 if none."""
    corpus = programs()
    named = sum(1 for *_, expect, _ in corpus if expect is Expect.NAMED)
    print(f"{len(corpus)} programs ({named} deadlocks, {len(corpus) - named} working), "
          f"cushion {cushion:g} s, {runs} runs", flush=True)  # fmt: skip
    wrong = 0
    for index in range(runs):
        with (
            tempfile.TemporaryDirectory() as root,
            concurrent.futures.ThreadPoolExecutor(workers) as pool,
        ):
            jobs = {
                pool.submit(judge, label, name, source, files, cushion, Path(root)): (
                    label, name, expect)
                for label, name, source, expect, files in corpus
            }  # fmt: skip
            alarms = misses = 0
            slowest = 0.0
            for job in concurrent.futures.as_completed(jobs):
                label, name, expect = jobs[job]
                verdict, seconds, out = job.result()
                good = (expect is Expect.NAMED and verdict is Verdict.NAMED) or (
                    expect is Expect.PASSES and verdict is Verdict.PASSED
                )
                if expect is Expect.NAMED and verdict is Verdict.NAMED:
                    slowest = max(slowest, seconds)
                if not good:
                    alarms += expect is Expect.PASSES
                    misses += expect is Expect.NAMED
                    print(f"run {index + 1}: {label}::{name}: expected {expect.value}, "
                          f"{verdict.value} in {seconds:.1f}s\n{out}", flush=True)  # fmt: skip
        wrong += alarms + misses
        print(f"run {index + 1}: {alarms} false alarms, {misses} misses; the slowest deadlock "
              f"named {slowest:.1f}s into its test", flush=True)  # fmt: skip
    return 1 if wrong else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cushion", type=float, default=1.0)
    args = parser.parse_args()
    return run(args.runs, args.cushion)


if __name__ == "__main__":
    sys.exit(main())
