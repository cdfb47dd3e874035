"""``ChildGroup``: the children of one session and epoch, and everything they start.

The group's children are spawned by a keeper (``tether._keeper``, ADR 0023), a small process
that is their parent and child subreaper, shared by every group of the run (ADR 0037):
every process they start stays below it, however it escapes its session, and if this process
dies, however it dies (SIGKILL, an unhandled SIGTERM, ``os._exit``, the OOM killer), the
keeper stops them all. It also reaps every orphan, so this
process is never left holding a zombie. Where there is no keeper (off Linux, or it could not
start or was killed), the group falls back to making this process the subreaper and telling its
orphans by their mark (``OrphanReaper``).

Leaving the group, by return, exception, cancellation or signal, stops every tree with the
escalation of ``_teardown.stop_processes`` inside a shielded scope bounded by
``2 * grace + 1`` seconds, so a cancelled harness still leaves no survivor.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Self, final

from .. import _backend
from .._backend import ExitedInAnotherTask
from ._activity import ToolActivity
from ._adoptive import OrphanReaper
from ._child import Child
from ._keepers import Keepers
from ._proc import become_subreaper
from ._ref import ProcessRef
from ._result import OnStall, RunResult, ToolStall
from ._spawn import prepare, spawn_process
from ._stdio import Stdio
from ._table import (
    EPOCH_VAR,
    GROUP_VAR,
    INHERITED,
    SESSION_VAR,
    descendants,
    refs,
    snapshot,
)
from ._teardown import KILL_WAIT, stop_processes
from ._tool import MAX_OUTPUT, run_tool
from ._twins import find_twins

logger = logging.getLogger("tether.process")
_group_ids = itertools.count(1)


RECHECKS = 3
RECHECK_DELAY = 0.005


class GroupState(enum.Enum):
    """Where a ``ChildGroup`` is in its life."""

    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@final
class ChildGroup:
    """Owns the process trees of one session and epoch; leaving it leaves none behind, and so
    does the death of this process.

    Args:
        session: marks every child's environment as ``TETHER_SESSION``.
        epoch: marks every child's environment as ``TETHER_EPOCH``. (``TETHER_GROUP`` names
            this group, so its processes are told from other code's children.)
        grace: seconds between SIGINT, SIGTERM and SIGKILL when stopping.
        reap_interval: how often the fallback (keeper-less) group reaps its orphans.
        keeper: spawn through a keeper process (the default on Linux; see the module).

    Example:
        ```python
        async with tether.ChildGroup(session="s1", epoch=7, grace=2.0) as children:
            child = await children.spawn(["sleep", "60"])
        # here the sleep, and anything it started, is gone and reaped
        ```
    """

    def __init__(
        self,
        session: str,
        epoch: int,
        grace: float = 2.0,
        *,
        reap_interval: float = 1.0,
        keeper: bool = True,
    ) -> None:
        if grace < 0 or reap_interval <= 0:
            raise ValueError(
                f"grace must be >= 0 and reap_interval > 0: {grace!r}, {reap_interval!r}"
            )
        self.session = session
        """The session every child is marked with (``TETHER_SESSION``)."""
        self.epoch = epoch
        """The epoch every child is marked with (``TETHER_EPOCH``)."""
        self.grace = grace
        """Seconds between SIGINT, SIGTERM and SIGKILL when the group stops."""
        self.reap_interval = reap_interval
        """How often a keeper-less group reaps its orphans, in seconds."""
        self._children: list[Child] = []
        self._group_id = f"{os.getpid()}-{next(_group_ids)}-{os.urandom(3).hex()}"
        self._state = GroupState.NEW
        self._want_keeper = keeper and hasattr(os, "pidfd_open")
        self._keepers = Keepers(
            session, grace, f"{GROUP_VAR}={self._group_id}",
            lambda: self._state in (GroupState.NEW, GroupState.OPEN), self._adopt_orphans,
        )  # fmt: skip
        self._reaper = OrphanReaper(self._group_id, self._sessions, reap_interval)
        self._helpers = _backend.Helpers()
        """The group's own tasks (its reaper, statuses after a keeper's loss): tied to no
        task, so that any task may close the group."""
        self._task: int | None = None
        """The task that entered the group."""

    def __repr__(self) -> str:
        return (
            f"<tether.ChildGroup session={self.session!r} epoch={self.epoch}"
            f" {self._state.value} children={len(self._children)}>"
        )

    @property
    def children(self) -> tuple[Child, ...]:
        """Every child spawned so far, in order (reaped ones included)."""
        return tuple(self._children)

    @property
    def keeper_pid(self) -> int | None:
        """The pid of the group's keeper, while it runs (``None`` without one)."""
        return self._keepers.pid

    async def __aenter__(self) -> Self:
        if self._state is not GroupState.NEW:
            raise RuntimeError("a ChildGroup can be entered once")
        self._task = _backend.task_id()
        if not self._want_keeper or not await self._keepers.start(self._helpers):
            await self._adopt_orphans()
        self._state = GroupState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await _backend.shielded(self._close)
        if _backend.task_id() != self._task:
            raise ExitedInAnotherTask(
                f"{self!r} was entered in one task and exited in another (an async generator's"
                " finalizer, say); its processes were stopped, but keep `async with` in one task"
            )

    async def _close(self) -> None:
        try:
            await self._stop_all()
        finally:  # _stop_all failed part way: release the rest
            self._reaper.stop()
            self._helpers.cancel()
            await self._keepers.close(self._children)

    async def _adopt_orphans(self) -> None:
        become_subreaper()
        self._reaper.start()
        self._helpers.start_soon(self._reaper.run, name=f"tether orphan reaper {self.session}")

    def _sessions(self) -> set[int]:
        return {child.pid for child in self._children}

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        replace_twins: bool = False,
        name: str | None = None,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        pass_fds: Sequence[int] = (),
    ) -> Child:
        """Start ``argv`` as a child in its own session and process group.

        Args:
            argv: the program and its arguments; the program is looked up on ``PATH``.
            stdin: ``subprocess.PIPE`` (then ``child.stdin`` is a stream: trio's ``FdStream``
                under trio, ``tether.FdStream`` under asyncio),
                ``subprocess.DEVNULL``, a descriptor, or ``None`` (this process's own).
            stdout: the same; with ``PIPE``, ``child.stdout`` is such a stream.
            stderr: the same, or ``subprocess.STDOUT`` (wherever stdout goes).
            pass_fds: descriptors of ours (above 2) the child gets under the same numbers;
                it gets no other, as under ``subprocess``.
            env: the child's environment (default: this process's); ``TETHER_SESSION`` and
                ``TETHER_EPOCH`` are always set.
            cwd: the child's working directory.
            replace_twins: first stop every process marked with this session and another
                epoch (``find_twins``) and wait until each is gone.
            name: for logs and ``repr`` (default: the program's base name).

        Raises:
            SpawnError: the program cannot be executed; nothing was started.
            RuntimeError: the group is not open.
        """
        if self._state is not GroupState.OPEN:
            raise RuntimeError(f"this ChildGroup is {self._state.value}; spawn inside `async with`")
        if replace_twins:
            await self.replace_twins()
        full_env = dict(os.environ if env is None else env)
        full_env[SESSION_VAR] = self.session
        full_env[EPOCH_VAR] = str(self.epoch)
        full_env[GROUP_VAR] = self._group_id
        for var in INHERITED:
            if var in os.environ:
                full_env.setdefault(var, os.environ[var])
        directory = None if cwd is None else os.fspath(cwd)
        label = name or (os.path.basename(argv[0]) if argv else "")
        path, args = prepare(argv, full_env, directory)
        if any(fd <= 2 for fd in pass_fds):
            raise ValueError(f"pass_fds are above 2 (stdio has its own arguments): {pass_fds}")
        stdio = Stdio(stdin, stdout, stderr)
        fds = {**stdio.child_fds, **{fd: fd for fd in pass_fds}}
        try:
            child = await self._keepers.spawn(argv, path, args, full_env, fds, label)
            if child is None:
                pid = spawn_process(argv, full_env, directory, fds=fds)
                child = Child._create(ProcessRef.of(pid), argv, label, self.grace)
                await _backend.checkpoint()
        except BaseException:
            stdio.failed()
            raise
        stdio.spawned()
        child.stdin, child.stdout, child.stderr = stdio.stdin, stdio.stdout, stdio.stderr
        child.pipes = stdio.pipe_fds()
        self._children.append(child)
        logger.info(
            "spawned %s pid=%d session=%s epoch=%d", child.name, child.pid, self.session, self.epoch
        )
        return child

    async def run(
        self,
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
        stalled: Callable[[ToolStall], Awaitable[None]] | None = None,
        max_output: int = MAX_OUTPUT,
        pass_fds: Sequence[int] = (),
    ) -> RunResult:
        """Run a tool to its end, as a harness needs: its output whole, and never a hang.

        Unlike ``trio.run_process`` or ``asyncio.create_subprocess_exec`` it captures output
        and does not raise on a non-zero exit by default (``capture_output=True,
        check=False``): a tool's failure is a result the engine reports to the model, not an
        exception.

        Args:
            input: bytes for its stdin (else ``/dev/null``).
            capture_output: read stdout and stderr into the result (else they are this
                process's own).
            timeout: seconds until its tree is stopped (``timed_out``).
            stall_after: seconds of awake time without progress (output, CPU, I/O, its tree
                changing) that make a stall (default ``DEFAULT_STALL_AFTER``, 300 s).
            on_stall: ``"stop"`` its tree and return, or ``"announce"`` and keep waiting.
            linger: seconds to wait for the end of its output once it exited; then whoever
                holds its pipes (a backgrounded grandchild) is named and stopped.
            check: raise ``ToolFailed`` (with the result) on a non-zero code, a timeout or a
                stall.
            env: as ``spawn``.
            cwd: as ``spawn``.
            name: as ``spawn`` (and the tool's name in logs).
            activity: the ``ToolActivity`` to mark (to read the tool's silence while it runs).
            stalled: awaited with the ``ToolStall`` when one is announced.
            max_output: bytes of each stream to keep (256 MiB); the rest is read and counted
                in ``dropped``.
            pass_fds: as ``spawn``.

        Cancelling it stops the tool's tree. Every stop is the group's escalation.
        """
        return await run_tool(
            self, argv, input=input, capture_output=capture_output, timeout=timeout,
            stall_after=stall_after, on_stall=on_stall, linger=linger, check=check, env=env,
            cwd=cwd, name=name, activity=activity, stalled=stalled, max_output=max_output,
            pass_fds=pass_fds,
        )  # fmt: skip

    @property
    def reaper_pid(self) -> int:
        """The process the group's orphans go to: its keeper, or this process."""
        return self.keeper_pid or os.getpid()

    async def replace_twins(self) -> None:
        """Stop every process marked with this session and another epoch (``find_twins``) with
        the group's escalation, logging each by pid and command line, and wait until each is
        gone."""
        twins = set(find_twins(self.session, exclude_epoch=self.epoch))
        if not twins:
            return
        for twin in sorted(twins, key=lambda ref: ref.pid):
            logger.warning("replacing twin of session %s: %s", self.session, twin.describe())
        survivors = await stop_processes(
            lambda: {twin for twin in twins if twin.state() is not None}, (), self.grace
        )
        if survivors:
            logger.error("%d twins of session %s survived", len(survivors), self.session)

    def members(self) -> set[ProcessRef]:
        """Every process this group answers for now: its children's trees, and the orphans
        that lead or sit in their sessions or carry its mark, reparented to its keeper (every
        orphan there while it is the keeper's only group) or, without one, to this process;
        once a keeper was lost, every process carrying its mark wherever it went."""
        stats = snapshot()
        roots = {child.pid for child in self._children if not child.done}
        roots |= self._keepers.orphans(stats, self._reaper.marked)
        if self.keeper_pid is None or self._keepers.lost:
            roots |= self._reaper.orphans(stats)
        if self._keepers.lost:
            roots |= {pid for pid in stats if self._reaper.marked(pid)}
        return refs(roots | descendants(stats, roots))

    async def aclose(self) -> None:
        """Stop every tree and reap; idempotent. Bounded by ``2 * grace + 1`` seconds, twice
        that if the keeper is lost while the group closes (its orphans are then found again
        by their mark, wherever they went). A cancellation meanwhile, asyncio's native one
        too, waits for its end."""
        await _backend.shielded(self._stop_all)

    async def _stop_all(self) -> None:
        if self._state is GroupState.CLOSED:
            return
        self._state = GroupState.CLOSING
        self._reaper.stop()
        leaders = [child.ref for child in self._children]
        bound = _backend.current_time() + 2 * self.grace + KILL_WAIT
        with _backend.cancel_scope(deadline=bound, shield=True):
            await stop_processes(self.members, leaders, self.grace)
            # One look can miss a descendant caught mid-exec (its environment, and so its mark,
            # unreadable for an instant) or one reparented just after: look again.
            for _ in range(RECHECKS):
                await _backend.sleep(RECHECK_DELAY)
                if not self.members():
                    break
                await stop_processes(self.members, leaders, self.grace)
        survivors = self.members()
        with _backend.cancel_scope(shield=True):
            await self._keepers.close(self._children)
        if self._keepers.lost:
            bound = _backend.current_time() + 2 * self.grace + KILL_WAIT
            with _backend.cancel_scope(deadline=bound, shield=True):
                survivors = set(await stop_processes(self.members, leaders, self.grace))
        for survivor in survivors:
            logger.error(
                "session %s: survivor after teardown: %s", self.session, survivor.describe()
            )
        for child in self._children:
            child.close_streams()
        self._state = GroupState.CLOSED
