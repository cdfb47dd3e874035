"""``JobController``: steps a job while it is running, whatever its steps call their actions.

Incident 003's first bug was an allowlist: the controller looped only for the actions it knew,
so a review asking for changes ended the loop with the job still ``running`` and nobody woken.
Here continuation depends on the job's status alone: a step names the next phase (the job goes
on), or a stop status (the run ends), or neither, and then the job is blocked with
``controller_exit_unhandled: <action>``. There is no list of actions anywhere.

The second bug was an interrupt read once: ``interrupt`` polls the thread server every
``settle_step`` until the turn is settled, up to ``settle_cap``. The third was a cancel that
could not finish while the server was down: ``cancel`` finalizes without it when every saved
turn is already finished, and otherwise blocks naming the unreachable server.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping

import trio

from ..liveness import Salvage, Stale
from ..process import ProcessRef
from ._model import (
    BLOCKED,
    RUNNING,
    SETTLED_TURN,
    STOPS,
    BackendUnreachable,
    Job,
    Planner,
    Step,
    TurnBackend,
    TurnState,
)
from ._store import JobStore

logger = logging.getLogger("tether.jobs")

StepFn = Callable[[Job, "JobController"], Awaitable[Step]]


class SettleTimeout(Exception):
    """A turn was not settled within the cap; the message names the turn and the cap."""


class JobController:
    """Runs jobs from a ``JobStore`` with the given ``steps`` (phase name to step function).

    Args:
        store: where jobs and planner wakes live.
        backend: the thread server (``interrupt``, ``snapshot``).
        planner: told at least once of every stop.
        steps: the step to run for each phase; ``step(job, controller) -> Step``.
        settle_step: seconds between snapshots while a turn settles.
        settle_cap: the longest a turn may take to settle after an interrupt.
    """

    def __init__(
        self,
        store: JobStore,
        backend: TurnBackend,
        planner: Planner,
        *,
        steps: Mapping[str, StepFn],
        settle_step: float = 0.5,
        settle_cap: float = 15.0,
    ) -> None:
        self.store = store
        """Where jobs, their turns and planner wakes are kept."""
        self.backend = backend
        """The remote thread server that runs turns."""
        self.planner = planner
        """Who is woken when a job stops."""
        self.steps = dict(steps)
        """The step function of each phase."""
        self.settle_step = settle_step
        """Seconds between two polls of an interrupted turn."""
        self.settle_cap = settle_cap
        """Seconds an interrupted turn gets to settle before the job moves on or blocks."""
        self.owner = _owner_of_this_process()
        """This controller's ``pid:token``, written on the jobs it runs."""

    def __repr__(self) -> str:
        return f"<tether.JobController {self.owner}>"

    async def run(self, job_id: str) -> Job:
        """Step the job until it stops; deliver the planner's wakes; the job as it ended.

        Another controller's job (one it owns) is left alone and returned as it is. If this
        run is cancelled, the claim is released, so ``recover`` can resume the job.
        """
        if not await self.store.claim(job_id, self.owner):
            return await self.store.load(job_id)
        try:
            job = await self.store.load(job_id)
            while job.status == RUNNING:
                job = await self._one_step(job)
                await self.store.save(job)
        finally:
            with trio.CancelScope(shield=True):
                await self.store.release(job_id, self.owner)
                await self.deliver_wakes()
        return job

    async def _one_step(self, job: Job) -> Job:
        step = self.steps.get(job.phase)
        if step is None:
            return _block(job, f"controller_exit_unhandled: no step for phase {job.phase!r}")
        try:
            result = await step(job, self)
        except Exception as exc:
            logger.exception("job %s: step %s raised", job.id, job.phase)
            return _block(job, f"step_raised: {job.phase}: {type(exc).__name__}: {exc}")
        if job.status != RUNNING:  # the step itself stopped the job (interrupt, cancel)
            return job
        if result.status is not None:
            job.status = result.status
            job.reason = result.reason
            if job.status not in STOPS and job.status != RUNNING:
                return _block(job, f"controller_exit_unhandled: {result.action} -> {job.status}")
            return job
        if result.phase is not None:
            job.phase = result.phase
            return job
        return _block(job, f"controller_exit_unhandled: {result.action}")

    async def recover(self) -> list[Job]:
        """Resume every running job that no live controller owns (its process is gone, or it
        released its claim), and deliver wakes left undelivered; the jobs as they ended."""
        await self.deliver_wakes()
        ended = []
        for job_id, owner in (await self.store.owners()).items():
            if owner is None or not _owner_alive(owner):
                if owner is not None:
                    await self.store.release(job_id, owner)
                ended.append(await self.run(job_id))
        return ended

    async def deliver_wakes(self) -> int:
        """Tell the planner of every undelivered stop, oldest first; how many were delivered.
        A wake the planner refuses (raises) stays queued for the next call."""
        delivered = 0
        for wake in await self.store.wakes():
            try:
                await self.planner.wake(wake.job, wake.status, wake.reason)
            except Exception as exc:  # noqa: BLE001 - any planner failure means "retry later"
                logger.warning("planner wake for job %s not delivered: %r", wake.job, exc)
                return delivered
            await self.store.woken(wake.seq)
            delivered += 1
        return delivered

    # -- turns --------------------------------------------------------------------------------

    async def settle(self, turn: str) -> TurnState:
        """Poll the turn every ``settle_step`` until it is completed, errored or interrupted (or
        its session stopped with no active turn), for at most ``settle_cap`` seconds.

        Raises:
            SettleTimeout: naming the turn, its last state and the cap.
            BackendUnreachable: the server could not be asked.
        """
        state = await self.backend.snapshot(turn)
        with trio.move_on_after(self.settle_cap):
            while not state.settled:
                await trio.sleep(self.settle_step)
                state = await self.backend.snapshot(turn)
            return state
        raise SettleTimeout(
            f"turn {turn} still {state.status} after {self.settle_cap:g}s (settle cap)"
        )

    async def interrupt(self, job: Job, turn: str, why: str) -> Job:
        """Interrupt a turn, settle it, and move the job to its next route; block it naming
        what was tried when no route is left, the turn does not settle, or the server is
        down. Returns the job (saved)."""
        try:
            await self.backend.interrupt(turn)
            state = await self.settle(turn)
        except SettleTimeout as exc:
            return await self._save(_block(job, f"interrupt_unsettled: {exc}"))
        except BackendUnreachable as exc:
            return await self._save(_block(job, f"interrupt_failed: backend unreachable ({exc})"))
        job.turns[turn] = state.status
        tried = ", ".join(job.routes[: job.route_index + 1])
        if job.route_index + 1 >= len(job.routes):
            return await self._save(_block(job, f"routes_exhausted: {why}; tried {tried}"))
        job.route_index += 1
        job.report.append(
            f"moved from route {job.routes[job.route_index - 1]} to {job.route}: {why}"
        )
        return await self._save(job)

    async def stalled(
        self, job: Job, turn: str, stale: Stale, output: Salvage | None = None
    ) -> Job:
        """A turn went stale: keep what it produced in the job's report, then interrupt it
        and move on (see ``interrupt``)."""
        if output is not None:
            job.report.append(output.describe())
        return await self.interrupt(job, turn, stale.reason)

    async def cancel(self, job_id: str) -> Job:
        """Stop every live turn of the job and finalize it ``cancelled`` (workspace released);
        with the server down, finalize anyway if every saved turn is already finished, else
        block with ``cancel_pending: backend unreachable (<error>)``."""
        job = await self.store.load(job_id)
        if job.status in STOPS - {BLOCKED}:
            return job
        live = [turn for turn, status in job.turns.items() if status not in SETTLED_TURN]
        try:
            for turn in live:
                await self.backend.interrupt(turn)
                job.turns[turn] = (await self.settle(turn)).status
        except BackendUnreachable as exc:
            if any(job.turns[turn] not in SETTLED_TURN for turn in live):
                return await self._save(_block(job, f"cancel_pending: backend unreachable ({exc})"))
        except SettleTimeout as exc:
            return await self._save(_block(job, f"cancel_pending: {exc}"))
        job.status = "cancelled"
        job.reason = "cancelled"
        job.workspace = None
        saved = await self._save(job)
        await self.deliver_wakes()
        return saved

    async def _save(self, job: Job) -> Job:
        await self.store.save(job)
        return job


def _block(job: Job, reason: str) -> Job:
    job.status = BLOCKED
    job.reason = reason
    logger.warning("job %s blocked: %s", job.id, reason)
    return job


def _owner_of_this_process() -> str:
    """``pid:create_time:random``: the process's identity, so a reused pid is not taken for
    the controller that crashed, and a random part per controller."""
    me = ProcessRef.of(os.getpid())
    return f"{me.pid}:{me.create_time!r}:{uuid.uuid4().hex[:8]}"


def _owner_alive(owner: str) -> bool:
    """Whether the process named in ``owner`` still runs (an earlier version wrote only
    ``pid:random``: then any process with that pid counts)."""
    pid_text, _, rest = owner.partition(":")
    created, identified, _ = rest.partition(":")
    if not identified:
        try:
            return ProcessRef.of(int(pid_text)).is_alive()
        except ProcessLookupError:
            return False
    ref = ProcessRef.find(int(pid_text), float(created))
    return ref is not None and ref.is_alive()
