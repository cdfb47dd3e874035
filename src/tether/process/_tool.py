"""``ChildGroup.run``: run a tool to its end and return what it wrote, and never hang doing it.

A tool ends in one of four ways, each bounded: it exits (and whatever still holds its output
pipes ``linger`` seconds later is named and stopped); its ``timeout`` passes; it stops
advancing for ``stall_after`` seconds of awake time (``_activity``: output, CPU, I/O, tree
changes), which is announced with what each of its processes waits on and, by default, stops
it; or the caller is cancelled. Whatever is stopped gets the group's escalation (SIGINT,
SIGTERM, SIGKILL, ``grace`` apart), so a stop ends within ``2 x grace + 1`` seconds.
"""

from __future__ import annotations

import logging
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import anyio
import attrs

from .. import _backend, _fdstream, _procfs
from .._clock import Clock
from ._activity import MarkedChildren, ToolActivity, TreeProgress
from ._capture import Capture
from ._holders import PipeHolder, pipe_holders
from ._ref import ProcessRef
from ._result import DEFAULT_STALL_AFTER, OnStall, RunResult, ToolFailed, ToolStall
from ._stdio import DEVNULL, PIPE
from ._table import refs
from ._teardown import KILL_WAIT, stop_processes
from ._waits import waits

if TYPE_CHECKING:
    from ._child import Child
    from ._group import ChildGroup

logger = logging.getLogger("tether.process")

TOOL_VAR = "TETHER_TOOL"
"""Marks the environment of one run's processes, so its orphans are told from the group's."""
READ_SIZE = 65536
MAX_OUTPUT = 256 * 1024 * 1024
"""Bytes of each stream a run keeps by default; the rest is read (so the tool never blocks on
a full pipe) and counted in ``RunResult.dropped``: ``yes`` must not take the harness's memory.
A stream past 16 MiB waits in a temporary file until the run ends (``_capture``)."""


async def run_tool(
    group: ChildGroup,
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    capture_output: bool = True,
    timeout: float | None = None,  # noqa: ASYNC109 - the tool's, ending in a result
    stall_after: float | None = None,
    on_stall: OnStall | str = OnStall.STOP,
    linger: float = 0.5,
    check: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    name: str | None = None,
    activity: ToolActivity | None = None,
    clock: Clock | None = None,
    stalled: Callable[[ToolStall], Awaitable[None]] | None = None,
    max_output: int = MAX_OUTPUT,
    pass_fds: Sequence[int] = (),
) -> RunResult:
    """See ``ChildGroup.run``."""
    policy = OnStall(on_stall)
    threshold = DEFAULT_STALL_AFTER if stall_after is None else stall_after
    if threshold <= 0 or linger < 0 or (timeout is not None and timeout < 0):
        raise ValueError("stall_after must be > 0, linger and timeout >= 0")
    mark = uuid.uuid4().hex[:12]
    full_env = {**(os.environ if env is None else env), TOOL_VAR: mark}
    child = await group.spawn(
        argv, env=full_env, cwd=cwd, name=name,
        stdin=DEVNULL if input is None else PIPE,
        stdout=PIPE if capture_output else None,
        stderr=PIPE if capture_output else None, pass_fds=pass_fds,
    )  # fmt: skip
    run = _Run(
        group, child, mark, activity or ToolActivity(clock), threshold, policy, stalled, max_output
    )
    deadline = math.inf if timeout is None else _backend.current_time() + timeout
    try:
        result = attrs.evolve(await run.until_done(input, deadline, linger), timeout=timeout)
    finally:
        child.close_streams()
    if check and result.failed:
        raise ToolFailed(result)
    return result


class _Run:
    """One run of one tool: its output, its watch, and how it ended."""

    def __init__(
        self,
        group: ChildGroup,
        child: Child,
        mark: str,
        activity: ToolActivity,
        threshold: float,
        policy: OnStall,
        stalled: Callable[[ToolStall], Awaitable[None]] | None,
        max_output: int,
    ) -> None:
        self.group = group
        self.child = child
        self.activity = activity
        self.threshold = threshold
        self.policy = policy
        self.report = stalled
        self.orphans = MarkedChildren(TOOL_VAR, mark)
        self.progress = TreeProgress(self._roots)
        self.out = Capture(max_output)
        self.err = Capture(max_output)
        self.drained = 0
        self.drains_done = _backend.event()
        self.timed_out = self.stalled = False
        self.holders: list[PipeHolder] = []
        activity.tree = self._pids
        activity.look = self.progress.sample
        activity.begin()

    def _roots(self) -> set[int]:
        roots = self.orphans.of(self.group.reaper_pid)
        if not self.child.done:
            roots.add(self.child.pid)
        return roots

    def _pids(self) -> set[int]:
        roots = self._roots()
        return roots | _procfs.subtree(roots)

    def _tree(self) -> set[ProcessRef]:
        roots = self._roots()
        found = refs(roots | _procfs.subtree(roots))
        held = {h.ref for h in self.holders if h.ref is not None and h.ref.state() is not None}
        return found | held | refs(_procfs.subtree(ref.pid for ref in held))

    async def until_done(self, input: bytes | None, deadline: float, linger: float) -> RunResult:
        try:
            return await self._until_done(input, deadline, linger)
        finally:
            self.out.close()
            self.err.close()

    async def _until_done(self, input: bytes | None, deadline: float, linger: float) -> RunResult:
        outputs = ((self.child.stdout, self.out), (self.child.stderr, self.err))
        pipes = [(stream, capture) for stream, capture in outputs if stream is not None]
        if not pipes:
            self.drains_done.set()
        try:
            async with _backend.task_group() as nursery:
                if input is not None and self.child.stdin is not None:
                    nursery.start_soon(self._feed, self.child.stdin, input)
                for stream, capture in pipes:
                    nursery.start_soon(self._drain, stream, capture, len(pipes))
                await self._watch(deadline)
                if not self.child.exited:
                    self.timed_out = True
                    logger.warning("tool %s timed out; stopping it", self.child.name)
                    await self._stop()
                elif not self.child.done:
                    await self.child.wait()  # it exited; its status is bounded (Child.wait)
                await self._linger(min(linger, max(0.0, deadline - _backend.current_time())))
                if not self.drains_done.is_set() or self.child.stdin is not None:
                    nursery.cancel_scope.cancel()
        except BaseException:
            await _backend.shielded(self._stop)
            raise
        return RunResult(
            argv=self.child.argv,
            returncode=self.child.returncode,
            status_lost=self.child.status_lost,
            stdout=await self.out.value(),
            stderr=await self.err.value(),
            timed_out=self.timed_out,
            stalled=self.stalled,
            holders=tuple(self.holders),
            max_silence=self.activity.finish(),
            stall_after=self.threshold,
            dropped=self.out.dropped + self.err.dropped,
        )

    async def _stop(self) -> None:
        with _backend.move_on_after(2 * self.group.grace + KILL_WAIT + 1.0):
            await stop_processes(self._tree, [self.child.ref], self.group.grace)
            await self.child.wait()

    async def _linger(self, linger: float) -> None:
        """The tool exited: wait for the end of its output; name and stop who keeps it open."""
        with _backend.move_on_after(linger):
            await self.drains_done.wait()
        if self.drains_done.is_set() or not self.child.pipes:
            return
        self.holders = await anyio.to_thread.run_sync(pipe_holders, self.child.pipes)
        for holder in self.holders:
            logger.warning(
                "tool %s (pid %d) exited %s, but %s: stopping it",
                self.child.name, self.child.pid, self.child.returncode, holder.describe(),
            )  # fmt: skip
        if self.holders:
            await self._stop()
        with _backend.move_on_after(KILL_WAIT):
            await self.drains_done.wait()

    async def _feed(self, stream: _fdstream.PipeStream, data: bytes) -> None:
        try:
            view = memoryview(data)
            for start in range(0, len(view), READ_SIZE):
                await stream.send_all(view[start : start + READ_SIZE])
                self.activity.advance()
            await stream.aclose()
        except _backend.closed_errors():
            pass  # the tool closed its input early; what it read is what it gets

    async def _drain(self, stream: _fdstream.PipeStream, capture: Capture, of: int) -> None:
        try:
            while data := await stream.receive_some(READ_SIZE):
                await capture.add(data)
                self.activity.advance()
        except _backend.closed_errors():
            pass
        self.drained += 1
        if self.drained == of:
            self.drains_done.set()

    async def _watch(self, deadline: float) -> None:
        """Wait for the tool to exit (or ``deadline``), sampling its tree every ``poll``
        seconds between; announce (and with ``OnStall.STOP``, stop) a stall."""
        poll = min(1.0, max(0.05, self.threshold / 10))
        announced = False
        first = True
        while not self.child.done:
            # The first look comes soon, so the next one can already see a change.
            with _backend.cancel_scope(
                deadline=min(deadline, _backend.current_time() + (0.05 if first else poll))
            ):
                await self.child.wait()
            if self.child.done or _backend.current_time() >= deadline:
                return
            first = False
            self.activity.look_now()
            silence = self.activity.silence()
            if silence < self.threshold:
                announced = False
                continue
            if announced:
                continue
            announced = self.stalled = True
            lines = tuple(waits(self.progress.pids))
            stall = ToolStall(self.child.name, silence, self.threshold, lines)
            logger.warning("%s", stall.describe())
            if self.report is not None:
                await self.report(stall)
            if self.policy is OnStall.STOP:
                await self._stop()
