"""tether.jobs: incident 003's job controller bugs, each as a regression test, on a real SQLite
job store with a fake thread server and trio's MockClock (no real waiting)."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.jobs import FakeBackend, Job, JobController, JobStore, Step
from tether.liveness import Stale, StreamClock, Threshold, Thresholds, salvage, watch_turn


@attrs.define
class Planner:
    """Records every wake; ``down`` makes it refuse them."""

    wakes: list[tuple[str, str, str | None]] = attrs.field(factory=list)
    down: bool = False

    async def wake(self, job: str, status: str, reason: str | None) -> None:
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ConnectionError("planner unreachable")
        self.wakes.append((job, status, reason))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    async with JobStore(tmp_path / "jobs.sqlite3") as store:
        yield store


def controller(
    store: JobStore, backend: FakeBackend, planner: Planner, **steps: Any
) -> JobController:
    return JobController(store, backend, planner, steps=steps)


async def test_a_review_asking_for_changes_goes_back_to_work_without_a_relaunch(
    store: JobStore,
) -> None:
    visited: list[str] = []

    async def work(job: Job, _: JobController) -> Step:
        visited.append("work")
        return Step("worked", phase="review")

    async def review(job: Job, _: JobController) -> Step:
        visited.append("review")
        job.data["rounds"] = job.data.get("rounds", 0) + 1
        if job.data["rounds"] == 1:
            return Step("review-changes-requested", phase="work")
        return Step("approved", status="completed", reason="approved")

    planner = Planner()
    await store.create(Job("j1", "work"))
    ended = await controller(store, FakeBackend(), planner, work=work, review=review).run("j1")
    assert visited == ["work", "review", "work", "review"]
    assert (ended.status, ended.reason) == ("completed", "approved")
    assert planner.wakes == [("j1", "completed", "approved")]
    assert (await store.load("j1")).status == "completed"


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (Step("resumed"), "controller_exit_unhandled: resumed"),
        (Step("weird", status="paused"), "controller_exit_unhandled: weird -> paused"),
    ],
)
async def test_a_step_with_no_next_state_blocks_and_wakes_the_planner(
    store: JobStore, result: Step, reason: str
) -> None:
    async def step(job: Job, _: JobController) -> Step:
        return result

    planner = Planner()
    await store.create(Job("j1", "s"))
    ended = await controller(store, FakeBackend(), planner, s=step).run("j1")
    assert (ended.status, ended.reason) == ("blocked", reason)
    assert planner.wakes == [("j1", "blocked", reason)]


async def test_a_raising_step_or_an_unknown_phase_blocks(store: JobStore) -> None:
    async def boom(job: Job, _: JobController) -> Step:
        raise RuntimeError("model said no")

    planner = Planner()
    await store.create(Job("j1", "boom"))
    await store.create(Job("j2", "nowhere"))
    jobs = controller(store, FakeBackend(), planner, boom=boom)
    assert (await jobs.run("j1")).reason == "step_raised: boom: RuntimeError: model said no"
    assert (await jobs.run("j2")).reason == "controller_exit_unhandled: no step for phase 'nowhere'"
    assert [w[1] for w in planner.wakes] == ["blocked", "blocked"]


async def test_an_interrupt_applied_after_60_ms_is_settled_and_moves_the_route(
    store: JobStore, autojump_clock: trio.testing.MockClock
) -> None:
    backend = FakeBackend(interrupt_delay=0.06)
    backend.start("t1")

    async def work(job: Job, jobs: JobController) -> Step:
        if job.route == "slow":
            job.turns["t1"] = "running"
            job = await jobs.interrupt(job, "t1", "stalled")
            return Step("route-moved", phase="work")
        return Step("done", status="completed")

    planner = Planner()
    await store.create(Job("j1", "work", routes=("slow", "fast")))
    started = trio.current_time()
    ended = await controller(store, backend, planner, work=work).run("j1")
    assert ended.status == "completed"
    assert ended.turns == {"t1": "interrupted"}
    assert ended.report == ["moved from route slow to fast: stalled"]
    assert 0.06 <= trio.current_time() - started <= 0.5 + 0.06  # one settle step past the delay
    snapshots = [call for call in backend.calls if call[0] == "snapshot"]
    assert len(snapshots) >= 2, "the interrupt was read once"


async def test_an_interrupt_never_applied_blocks_naming_the_cap(
    store: JobStore, autojump_clock: trio.testing.MockClock
) -> None:
    backend = FakeBackend(interrupt_delay=None)
    backend.start("t1")

    async def work(job: Job, jobs: JobController) -> Step:
        await jobs.interrupt(job, "t1", "stalled")
        return Step("after-interrupt", phase="work")

    planner = Planner()
    await store.create(Job("j1", "work", routes=("a", "b")))
    ended = await controller(store, backend, planner, work=work).run("j1")
    assert ended.status == "blocked"
    assert ended.reason == "interrupt_unsettled: turn t1 still running after 15s (settle cap)"
    assert planner.wakes == [("j1", "blocked", ended.reason)]


async def test_the_last_route_stalling_blocks_naming_every_route_tried(
    store: JobStore, autojump_clock: trio.testing.MockClock
) -> None:
    backend = FakeBackend()

    async def work(job: Job, jobs: JobController) -> Step:
        turn = f"t{job.route_index}"
        backend.start(turn)
        await jobs.interrupt(job, turn, "stalled")
        return Step("moved", phase="work")

    await store.create(Job("j1", "work", routes=("a", "b")))
    ended = await controller(store, backend, Planner(), work=work).run("j1")
    assert ended.reason == "routes_exhausted: stalled; tried a, b"


async def test_cancel_finishes_without_the_server_when_every_turn_is_terminal(
    store: JobStore,
) -> None:
    backend = FakeBackend()
    backend.reachable = False
    planner = Planner()
    await store.create(
        Job("j1", "work", status="blocked", turns={"t1": "completed"}, workspace="/w")
    )
    ended = await controller(store, backend, planner).cancel("j1")
    assert (ended.status, ended.workspace) == ("cancelled", None)
    assert planner.wakes == [("j1", "cancelled", "cancelled")]


async def test_cancel_with_a_live_turn_and_the_server_down_blocks_naming_it(
    store: JobStore,
) -> None:
    backend = FakeBackend()
    backend.reachable = False
    await store.create(
        Job("j1", "work", turns={"t1": "completed", "t2": "running"}, workspace="/w")
    )
    ended = await controller(store, backend, Planner()).cancel("j1")
    assert ended.status == "blocked"
    assert ended.reason is not None
    assert ended.reason.startswith("cancel_pending: backend unreachable (fake thread server")
    assert "process group" not in ended.reason
    assert ended.workspace == "/w"


async def test_cancel_interrupts_live_turns_and_settles_them(
    store: JobStore, autojump_clock: trio.testing.MockClock
) -> None:
    backend = FakeBackend(interrupt_delay=0.06)
    backend.start("t2")
    await store.create(
        Job("j1", "work", turns={"t1": "completed", "t2": "running"}, workspace="/w")
    )
    ended = await controller(store, backend, Planner()).cancel("j1")
    assert (ended.status, ended.turns["t2"], ended.workspace) == ("cancelled", "interrupted", None)


async def test_a_refused_wake_is_retried_by_the_next_controller(store: JobStore) -> None:
    async def done(job: Job, _: JobController) -> Step:
        return Step("done", status="completed")

    planner = Planner(down=True)
    await store.create(Job("j1", "done"))
    await controller(store, FakeBackend(), planner, done=done).run("j1")
    assert planner.wakes == []
    assert [w.status for w in await store.wakes()] == ["completed"]
    planner.down = False
    await controller(store, FakeBackend(), planner, done=done).recover()
    assert planner.wakes == [("j1", "completed", None)]
    assert await store.wakes() == []


async def test_a_controller_that_stops_mid_job_leaves_it_to_recover(store: JobStore) -> None:
    entered = trio.Event()

    async def slow(job: Job, _: JobController) -> Step:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def done(job: Job, _: JobController) -> Step:
        return Step("done", status="completed")

    await store.create(Job("j1", "slow"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller(store, FakeBackend(), Planner(), slow=slow).run, "j1")
        await entered.wait()
        nursery.cancel_scope.cancel()  # the controller dies mid-step
    assert await store.owners() == {"j1": None}  # running, and nobody steps it
    planner = Planner()
    (ended,) = await controller(store, FakeBackend(), planner, slow=done).recover()
    assert ended.status == "completed"
    assert planner.wakes == [("j1", "completed", None)]


async def test_a_stale_turn_is_salvaged_then_moved_to_the_next_route(
    store: JobStore, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    review = tmp_path / "review.log"
    review.write_text("request_changes: 7 majors")
    backend = FakeBackend()

    @attrs.define
    class Turn:
        route: str
        text: str = ""
        artifacts: tuple[str, ...] = (str(review),)

    class TrioTime:
        def now(self) -> float:
            return trio.current_time()

        def suspended(self) -> float:
            return 0.0

    async def work(job: Job, jobs: JobController) -> Step:
        turn = Turn(job.route)
        backend.start(job.route)
        job.turns[job.route] = "running"
        stream = StreamClock(job.route, clock=TrioTime())
        stream.mark("reasoning")
        turn.text = "parsing the review"
        if job.route == "fast":
            stream.mark("completed")
            return Step("done", status="completed")
        thresholds = Thresholds(job.route, Threshold(60, "max_gap"), Threshold(60, "max_gap"))

        async def on_stale(stale: Stale) -> None:
            await jobs.stalled(job, job.route, stale, salvage(turn, stale.reason))

        await watch_turn(stream, thresholds, on_stale)
        return Step("moved", phase="work")

    await store.create(Job("j1", "work", routes=("luna", "fast")))
    ended = await controller(store, backend, Planner(), work=work).run("j1")
    assert ended.status == "completed"
    salvaged = ended.report[0].splitlines()
    assert salvaged[0].startswith("salvaged from route luna (no part for 61.0s")
    assert salvaged[1:] == [
        "    parsing the review",
        f"file {review}: 25 bytes:",
        "    request_changes: 7 majors",
    ]
    assert ended.report[1].startswith("moved from route luna to fast: no part for 61.0s")


OP = st.one_of(
    st.tuples(st.just("next"), st.text("abcdefgh-", min_size=1, max_size=12)),
    st.tuples(st.just("stop"), st.sampled_from(["completed", "failed", "blocked", "cancelled"])),
    st.tuples(st.just("unknown"), st.text("xyz-", min_size=1, max_size=8)),
    st.tuples(st.just("status"), st.sampled_from(["paused", "waiting", "cancelling"])),
    st.tuples(st.just("raise"), st.just("")),
    st.tuples(
        st.just("interrupt"),
        st.sampled_from(["0.06", "0.7", "never", "down"]),
    ),
    st.tuples(st.just("crash"), st.just("")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(script=st.lists(OP, max_size=12), planner_down=st.booleans())
async def test_every_job_stops_with_its_planner_woken(
    autojump_clock: trio.testing.MockClock, script: list[tuple[str, str]], planner_down: bool
) -> None:
    """Random steps (actions no code knows, explicit and unknown statuses, raises), random
    interrupt delays and outages, controller crashes mid-step and a planner that is down: the
    job always ends in a terminal or blocked state, no running job is left without a
    controller, and the planner hears of the stop at least once."""
    backend = FakeBackend()
    crashed: set[int] = set()
    crash = {"event": trio.Event()}

    async def step(job: Job, jobs: JobController) -> Step:
        index = job.data.get("i", 0)
        job.data["i"] = index + 1
        if index >= len(script):
            return Step("end-of-script")
        op, arg = script[index]
        if op == "next":
            return Step(arg, phase="s")
        if op == "stop":
            return Step("stop", status=arg, reason=f"script: {arg}")
        if op == "unknown":
            return Step(arg)
        if op == "status":
            return Step("odd", status=arg)
        if op == "raise":
            raise ValueError("scripted failure")
        if op == "crash" and index not in crashed:
            crashed.add(index)
            crash["event"].set()
            await trio.sleep_forever()
        if op == "interrupt":
            turn = f"t{index}"
            backend.start(turn)
            job.turns[turn] = "running"
            backend.reachable = arg != "down"
            backend.interrupt_delay = (
                None if arg == "never" else float(arg) if arg != "down" else 0.06
            )
            await jobs.interrupt(job, turn, "stalled")
            backend.reachable = True
        return Step("continue", phase="s")

    planner = Planner(down=planner_down)
    with tempfile.TemporaryDirectory() as tmp:
        async with JobStore(Path(tmp) / "jobs.sqlite3") as store:
            await store.create(Job("j1", "s", routes=("a", "b", "c")))
            for _ in range(len(script) + 2):  # each crash costs one controller
                crash["event"] = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_on, crash["event"], nursery.cancel_scope)
                    await controller(store, backend, planner, s=step).recover()
                    nursery.cancel_scope.cancel()
                if (await store.load("j1")).status != "running":
                    break
            job = await store.load("j1")
            assert job.status in ("completed", "failed", "cancelled", "blocked"), job
            assert await store.owners() == {}
            recorded = await store.wakes(pending=False)
            assert recorded, "the job stopped without a planner wake"
            assert recorded[-1].status == job.status
            planner.down = False
            await controller(store, backend, planner, s=step).recover()
            assert await store.wakes() == []
            assert planner.wakes[-1][:2] == ("j1", job.status)


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def test_a_stopped_session_with_no_active_turn_counts_as_settled(
    store: JobStore, autojump_clock: trio.testing.MockClock
) -> None:
    backend = FakeBackend(interrupt_delay=None)  # the interrupt itself never lands
    backend.start("t1")
    backend.stop_session("t1")
    jobs = controller(store, backend, Planner())
    state = await jobs.settle("t1")
    assert (state.status, state.session_stopped, state.active) == ("running", True, False)
    assert state.settled
