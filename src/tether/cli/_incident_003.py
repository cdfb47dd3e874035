"""Incident 003: silent jobs. A review asking for changes goes back to work and to re-review in
one controller run; an interrupt the server applies 60 ms late is settled, not a failure; a
cancel with the server down finishes; and stream liveness, replayed from the incident's figures
on an injected clock (no waiting): a dead stream is caught at threshold + one poll, a healthy
reasoning stream whose native events were silent for 92 to 108 s is not, nor is a 99 s sleep.
"""

from __future__ import annotations

import time
from pathlib import Path

import attrs
import trio

from ..jobs import FakeBackend, Job, JobController, JobStore, Step
from ..liveness import Ledger, ManualClock, Stale, StreamClock, Thresholds, TurnStats, verdict
from ._timeline import Timeline, Verdict

# Incident 003, job -2: the gaps between reasoning parts (s), one of them 18 s.
HEALTHY_GAPS = (7.4, 10.4, 8.7, 18.0, 11.0, 11.3, 5.7, 5.1, 13.4, 7.6, 7.3)
POLL = 1.0


@attrs.define
class _Planner:
    wakes: list[tuple[str, str, str | None]] = attrs.field(factory=list)

    async def wake(self, job: str, status: str, reason: str | None) -> None:
        await trio.lowlevel.checkpoint()
        self.wakes.append((job, status, reason))


def _replay(events: list[tuple[float, str]], until: float, thresholds: Thresholds) -> float | None:
    """Feed parts (``"sleep:N"`` suspends the host) on a manual clock, polling a verdict each
    second of awake time; when it first went stale (``None``: never)."""
    clock = ManualClock()
    stream = StreamClock(thresholds.route, clock=clock)
    now = 0.0
    pending = list(events)
    while now <= until:
        while pending and pending[0][0] <= now:
            _, part = pending.pop(0)
            if part.startswith("sleep:"):
                clock.suspend(float(part[6:]))
            else:
                stream.mark(part)
        if isinstance(verdict(stream, thresholds), Stale):
            return now
        clock.advance(POLL)
        now += POLL
    return None


async def _learned(directory: Path) -> Thresholds:
    async with Ledger(directory / "ledger.sqlite3") as ledger:
        for n in range(20):  # twenty healthy turns on this route: gaps up to 18 s
            await ledger.record(TurnStats("luna", 3.0 + n * 0.2, 10 + n * 0.4, 60, "completed", 0))
        return await ledger.thresholds("luna")


async def replay_silent_job(log: Timeline, root: Path) -> list[Verdict]:
    """The scenario; its verdicts."""
    directory = root / "003"
    directory.mkdir(mode=0o700)
    planner = _Planner()
    backend = FakeBackend(interrupt_delay=0.06)
    visited: list[str] = []

    async def work(job: Job, jobs: JobController) -> Step:
        visited.append(f"work on {job.route}")
        if job.route == "luna" and "t1" not in job.turns:
            backend.start("t1")
            job.turns["t1"] = "running"
            log.event("controller", "turn t1 on luna stalled: interrupt, then poll until settled")
            started = trio.current_time()
            await jobs.interrupt(job, "t1", "stalled")
            log.event(
                "controller", f"t1 {job.turns['t1']} after {trio.current_time() - started:.2f} s"
            )
            return Step("route-moved", phase="work")
        return Step("worked", phase="review")

    async def review(job: Job, jobs: JobController) -> Step:
        rounds = job.data["reviews"] = job.data.get("reviews", 0) + 1
        visited.append(f"review {rounds}")
        if rounds == 1:
            log.event("controller", "review: request_changes -> back to a worker (no allowlist)")
            return Step("review-changes-requested", phase="work")
        return Step("approved", status="completed", reason="approved")

    async with JobStore(directory / "jobs.sqlite3") as store:
        controller = JobController(store, backend, planner, steps={"work": work, "review": review})
        await store.create(Job("job-2", "work", routes=("luna", "spark")))
        job = await controller.run("job-2")
        log.event("controller", f"job-2 {job.status}: {' -> '.join(visited)}")
        backend.reachable = False
        await store.create(
            Job("job-3", "work", status="blocked", turns={"t9": "completed"}, workspace="/w/3")
        )
        cancelled = await controller.cancel("job-3")
        log.event("controller", f"job-3 cancelled with the server down: {cancelled.status}")
        wakes = list(planner.wakes)

    thresholds = await _learned(directory)
    mid = thresholds.mid_stream
    log.event("ledger", f"route luna: mid-stream threshold {mid.seconds:.1f} s from {mid.source}")
    healthy: list[tuple[float, str]] = [(0.0, "reasoning")]
    for gap in HEALTHY_GAPS:
        healthy.append((round(healthy[-1][0] + gap, 1), "reasoning"))
    healthy.append((healthy[-1][0] + 3, "completed"))
    started = time.perf_counter()
    healthy_stale = _replay(healthy, healthy[-1][0] + 60, thresholds)
    dead_stale = _replay([(0.0, "reasoning")], 400, thresholds)
    sleep_stale = _replay(
        [(0.0, "reasoning"), (4.0, "sleep:99"), (6.0, "reasoning"), (20.0, "completed")],
        40,
        thresholds,
    )
    done_stale = _replay([(0.0, "text"), (1.0, "completed")], 60, thresholds)
    replay_ms = (time.perf_counter() - started) * 1000
    log.event(
        "liveness",
        f"healthy: {'never stale' if healthy_stale is None else f'stale at {healthy_stale}'}"
        " (the old fixed 60 s window on native events fired at 60 s);"
        f" dead: stale at {dead_stale} s; replayed in {replay_ms:.1f} ms",
    )
    limit = mid.seconds + POLL
    return [
        Verdict(
            "a review asking for changes goes back to work, then re-review, in one run",
            job.status == "completed" and visited.count("review 2") == 1,
            " -> ".join(v.split(" on ")[0] for v in visited),
        ),
        Verdict(
            "an interrupt applied 60 ms late is settled and the job moves route",
            job.turns.get("t1") == "interrupted" and job.route == "spark",
            f"t1 {job.turns.get('t1')}, route {job.route}",
        ),
        Verdict(
            "a cancel with the server down finishes when every turn is done",
            cancelled.status == "cancelled" and cancelled.workspace is None,
            f"{cancelled.status}, workspace released",
        ),
        Verdict(
            "every stop wakes the planner",
            [w[1] for w in wakes] == ["completed", "cancelled"],
            f"{len(wakes)} wakes",
        ),
        Verdict(
            "a healthy reasoning stream is never stale",
            healthy_stale is None,
            f"max gap 18 s < {mid.seconds:.1f} s ({mid.source})",
        ),
        Verdict(
            "a dead stream is stale by threshold + one poll",
            dead_stale is not None and dead_stale <= limit,
            f"at {dead_stale} s <= {limit:.1f} s",
        ),
        Verdict("a 99 s host sleep is not silence", sleep_stale is None, "6 s awake silence"),
        Verdict("a turn completed 59 s ago is never stale", done_stale is None, "settled"),
    ]
