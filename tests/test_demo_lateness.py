"""The demo tells a loaded host from a broken guarantee (issue 43, row 2): a time bound missed
by no more than the host's measured CPU wait reads LATE and counts; any other miss fails."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tether.cli._hostdelay import Stopwatch, cpu_wait_total
from tether.cli._timeline import Verdict


def step(took: float, host_delay: float) -> Stopwatch:
    return Stopwatch(started=0.0, waited_before=0.0, took=took, host_delay=host_delay)


def test_within_its_bound_a_step_passes_whatever_the_host_did() -> None:
    verdict = Verdict.timed("g", True, step(1.2, 0.0), 1.6)
    assert (verdict.passed, verdict.late) == (True, False)
    assert verdict.figure == "1.20 s (bound 1.6 s)"


def test_a_miss_the_host_s_cpu_wait_covers_is_late_and_counts() -> None:
    verdict = Verdict.timed("g", True, step(1.63, 0.41), 1.6)
    assert (verdict.passed, verdict.late) == (True, True)
    assert verdict.figure == "1.63 s (bound 1.6 s), the host's CPU wait 0.41 s"


@pytest.mark.parametrize(
    ("took", "host_delay", "held"),
    [
        (1.63, 0.01, True),  # a quiet host: the miss is tether's
        (7.0, 7.0, True),  # over 4 bounds: a hang is not load
        (1.63, 0.41, False),  # late, but the rest of the guarantee failed
        (1.2, 0.0, False),
    ],
)
def test_any_other_miss_fails(took: float, host_delay: float, held: bool) -> None:
    verdict = Verdict.timed("g", held, step(took, host_delay), 1.6)
    assert (verdict.passed, verdict.late) == (False, False)


def test_the_cpu_wait_is_psi_s_some_total_in_seconds(tmp_path: Path) -> None:
    pressure = tmp_path / "cpu"
    pressure.write_text(
        "some avg10=21.92 avg60=33.17 avg300=35.84 total=214819000\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert cpu_wait_total(str(pressure)) == pytest.approx(214.819)
    assert cpu_wait_total(str(tmp_path / "missing")) is None
    pressure.write_text("nonsense\n")
    assert cpu_wait_total(str(pressure)) is None


def test_a_stopwatch_counts_the_cpu_wait_of_busy_processes_during_its_step() -> None:
    """Three spinning processes on this host (2 cores in CI): the step's CPU wait grows."""
    if cpu_wait_total() is None:
        pytest.skip("this kernel has no PSI (/proc/pressure/cpu): nothing is excused here")
    spinners = [
        subprocess.Popen(["sh", "-c", "while :; do :; done"])
        for _ in range((os.cpu_count() or 1) + 1)
    ]
    try:
        watch = Stopwatch()
        deadline = time.monotonic() + 30
        while (cpu_wait_total() or 0.0) - (watch.waited_before or 0.0) < 0.05:
            assert time.monotonic() < deadline, "the spinners never made anything wait"
            time.sleep(0.01)  # bounded polling: the kernel's counter is the event
        watch.stop()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert watch.host_delay >= 0.05
    assert watch.took > 0
