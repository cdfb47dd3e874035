"""``tether demo``: the three incidents of ``shared/seeds`` replayed on real processes, real
signals, a real daemon and the embedded SQLite store, each a timeline printed as it happens and
a verdict table, one row per guarantee, PASS or FAIL with the measured figure (or LATE: a time
bound missed by no more than the host's measured CPU wait, counted as held).

1. SIGTERM mid tool call (seed 000); 2. a Superseded phantom (seed 004); 3. a silent job
(seed 003); 4. seed 000 again on the real model protocol: an OpenAI-compatible server, the
model's shell call, the resumed model continuing; 5. seeds 000 and 004 with the harnesses
under ``asyncio.run``. The run's files (transcripts, stores, logs)
live in one temporary directory, removed at the end unless ``--keep``.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from ._incident_000 import replay_sigterm
from ._incident_000_model import replay_model
from ._incident_003 import replay_silent_job
from ._incident_004 import replay_superseded
from ._incident_asyncio import replay_on_asyncio
from ._timeline import Timeline, Verdict

Replay = Callable[[Timeline, Path], Awaitable[list[Verdict]]]

SCENARIOS: tuple[tuple[int, str, Replay], ...] = (
    (1, "SIGTERM mid tool call (seed 000)", replay_sigterm),
    (2, "a Superseded phantom (seed 004)", replay_superseded),
    (3, "a silent job (seed 003)", replay_silent_job),
    (4, "SIGTERM mid tool call, on the real model protocol (seed 000)", replay_model),
    (5, "seeds 000 and 004 with the harness under asyncio.run", replay_on_asyncio),
)


async def demo(
    out: TextIO, *, scenario: int | None = None, as_json: bool = False, keep: bool = False
) -> int:
    """Run the scenarios (or one); 0 when every guarantee held."""
    root = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    shown = io.StringIO() if as_json else out
    results = []
    started = time.perf_counter()
    try:
        for number, title, replay in SCENARIOS:
            if scenario is not None and number != scenario:
                continue
            print(f"{number}. {title}", file=shown)
            try:
                verdicts = await replay(Timeline(shown), root)
            except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a FAIL row
                verdicts = [Verdict("the scenario ran to its end", False, repr(exc)[:80])]
            _table(verdicts, shown)
            results.append((number, title, verdicts))
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    took = time.perf_counter() - started
    passed = all(v.passed for _, _, verdicts in results for v in verdicts)
    if as_json:
        report = {
            "passed": passed,
            "seconds": round(took, 2),
            "directory": str(root) if keep else None,
            "scenarios": [
                {
                    "number": number,
                    "title": title,
                    "verdicts": [
                        {
                            "guarantee": v.guarantee,
                            "passed": v.passed,
                            "late": v.late,
                            "measured": v.figure,
                        }
                        for v in verdicts
                    ],
                }
                for number, title, verdicts in results
            ],
        }
        print(json.dumps(report, indent=2), file=out)
    else:
        count = sum(len(verdicts) for _, _, verdicts in results)
        held = sum(v.passed for _, _, verdicts in results for v in verdicts)
        late = sum(v.late for _, _, verdicts in results for v in verdicts)
        print(f"{held} of {count} guarantees held in {took:.1f} s.", file=out)
        if late:
            print(
                f"{late} of them LATE: over their time bound by no more than the host's "
                "measured CPU wait (a loaded machine, not tether); on a quiet one they pass.",
                file=out,
            )
        if keep:
            print(f"The run's directory (transcripts, stores, logs): {root}", file=out)
    return 0 if passed else 1


def _table(verdicts: list[Verdict], out: TextIO) -> None:
    print("\n| guarantee | verdict | measured |\n| --- | --- | --- |", file=out)
    for v in verdicts:
        verdict = "LATE" if v.late else "PASS" if v.passed else "FAIL"
        print(f"| {v.guarantee} | {verdict} | {v.figure} |", file=out)
    print(file=out)
