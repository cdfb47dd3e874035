"""``ChildGroup``: the children of one session and epoch, and everything they start.

Leaving the group, by return, exception, cancellation or signal, stops every tree with the
escalation of ``_teardown.stop_processes`` inside a shielded scope bounded by
``2 * grace + 1`` seconds, so a cancelled harness still leaves no survivor.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Self, final

import trio

from ._child import Child
from ._proc import Stat, become_subreaper
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._spawn import spawn_process
from ._table import (
    EPOCH_VAR,
    GROUP_VAR,
    INHERITED,
    SESSION_VAR,
    descendants,
    marks,
    refs,
    snapshot,
)
from ._teardown import KILL_WAIT, stop_processes
from ._twins import find_twins

logger = logging.getLogger("tether.process")
_group_ids = itertools.count(1)


RECHECKS = 3
RECHECK_DELAY = 0.005


@final
class ChildGroup:
    """Owns the process trees of one session and epoch; leaving it leaves none behind.

    Args:
        session: marks every child's environment as ``TETHER_SESSION``.
        epoch: marks every child's environment as ``TETHER_EPOCH``. (``TETHER_GROUP`` names
            this group, so its orphans are told from other code's children.)
        grace: seconds between SIGINT, SIGTERM and SIGKILL when stopping.

    Entering makes this process a child subreaper (Linux), so descendants that escape their
    tree are reparented here and can be found and reaped.

    Example::

        async with tether.ChildGroup(session="s1", epoch=7, grace=2.0) as children:
            child = await children.spawn(["sleep", "60"])
        # here the sleep, and anything it started, is gone and reaped
    """

    def __init__(
        self, session: str, epoch: int, grace: float = 2.0, *, reap_interval: float = 1.0
    ) -> None:
        if grace < 0 or reap_interval <= 0:
            raise ValueError(
                f"grace must be >= 0 and reap_interval > 0: {grace!r}, {reap_interval!r}"
            )
        self.session = session
        self.epoch = epoch
        self.grace = grace
        self.reap_interval = reap_interval
        self._children: list[Child] = []
        self._adopted: dict[int, ProcessRef] = {}
        self._group_id = f"{os.getpid()}-{next(_group_ids)}"
        self._state = "new"
        self._reaper: trio.CancelScope | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None

    def __repr__(self) -> str:
        return (
            f"<tether.ChildGroup session={self.session!r} epoch={self.epoch}"
            f" {self._state} children={len(self._children)}>"
        )

    @property
    def children(self) -> tuple[Child, ...]:
        """Every child spawned so far, in order (reaped ones included)."""
        return tuple(self._children)

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a ChildGroup can be entered once")
        become_subreaper()
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        await nursery.start(self._reap_orphans, name=f"tether orphan reaper {self.session}")
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            assert self._reaper is not None
            assert self._nursery_manager is not None
            self._reaper.cancel()
            # The reaper never raises; the body's own exception propagates on its own.
            await self._nursery_manager.__aexit__(None, None, None)

    async def _reap_orphans(self, task_status: trio.TaskStatus[None]) -> None:
        """Adopt orphans of the group while they live (their environment is readable then) and
        reap them once they exit, so a long-lived owner collects no zombies."""
        # Its own scope: the nursery's would also cancel the body of ``async with ChildGroup``.
        with trio.CancelScope() as self._reaper:
            task_status.started()
            while True:
                await trio.sleep(self.reap_interval)
                self._reap_once()

    def _reap_once(self) -> None:
        for pid in self._orphans(snapshot()):
            ref = self._adopted.get(pid)
            if ref is None:
                try:
                    ref = self._adopted[pid] = ProcessRef.of(pid)
                except ProcessLookupError:
                    continue
            if ref.state() == "Z":
                _reap_orphan(pid)
                del self._adopted[pid]

    def _marked(self, pid: int) -> bool:
        mark = marks(pid)
        return mark is not None and mark.group == self._group_id

    def _orphans(self, stats: dict[int, Stat]) -> set[int]:
        """This process's children that belong to the group but were not spawned by it."""
        me = os.getpid()
        sessions = {child.pid for child in self._children}
        found: set[int] = set()
        for pid, stat in stats.items():
            if stat.ppid != me or pid in SPAWNED:
                continue
            adopted = self._adopted.get(pid)
            if adopted is not None and adopted.state() is None:
                del self._adopted[pid]  # gone without us: its pid may be another's now
                adopted = None
            if adopted is not None or stat.session in sessions or self._marked(pid):
                found.add(pid)
        return found

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        replace_twins: bool = False,
        name: str | None = None,
    ) -> Child:
        """Start ``argv`` as a child in its own session and process group.

        Args:
            argv: the program and its arguments; the program is looked up on ``PATH``.
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
        if self._state != "open":
            raise RuntimeError(f"this ChildGroup is {self._state}; spawn inside `async with`")
        if replace_twins:
            await self.replace_twins()
        full_env = dict(os.environ if env is None else env)
        full_env[SESSION_VAR] = self.session
        full_env[EPOCH_VAR] = str(self.epoch)
        full_env[GROUP_VAR] = self._group_id
        for var in INHERITED:
            if var in os.environ:
                full_env.setdefault(var, os.environ[var])
        pid = spawn_process(argv, full_env, None if cwd is None else os.fspath(cwd))
        child = Child._create(
            ProcessRef.of(pid), argv, name or os.path.basename(argv[0]), self.grace
        )
        self._children.append(child)
        logger.info(
            "spawned %s pid=%d session=%s epoch=%d", child.name, pid, self.session, self.epoch
        )
        await trio.lowlevel.checkpoint()
        return child

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
        carrying its mark (or its children's sessions) that were reparented to this process."""
        stats = snapshot()
        roots = {child.pid for child in self._children if child.returncode is None}
        roots |= self._orphans(stats)
        return refs(roots | descendants(stats, roots))

    async def aclose(self) -> None:
        """Stop every tree and reap; idempotent. Bounded by ``2 * grace + 1`` seconds."""
        if self._state == "closed":
            return
        self._state = "closing"
        if self._reaper is not None:
            self._reaper.cancel()
        leaders = [child.ref for child in self._children]
        with trio.move_on_after(2 * self.grace + KILL_WAIT, shield=True):
            await stop_processes(self.members, leaders, self.grace)
            # One look can miss a descendant caught mid-exec (its environment, and so its mark,
            # unreadable for an instant) or one reparented to us just after: look again.
            for _ in range(RECHECKS):
                await trio.sleep(RECHECK_DELAY)
                if not self.members():
                    break
                await stop_processes(self.members, leaders, self.grace)
        survivors = self.members()
        for survivor in survivors:
            logger.error(
                "session %s: survivor after teardown: %s", self.session, survivor.describe()
            )
        self._state = "closed"


def _reap_orphan(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # someone else's waitpid(-1) got it first
        os.waitpid(pid, os.WNOHANG)
