"""``Keepers``: a group's keeper, kept running. It is started when the group opens and,
if it is killed, replaced; each one stops the group's marked processes too, so the orphans
of a killed keeper still die with the owner (ADR 0031). While no keeper runs (between a
loss and its replacement, or when none can start), the group spawns in this process."""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from ._child import REPORT_TIMEOUT, Child
from ._keeper import Keeper, KeeperUnavailable, KeeperUnresponsive
from ._spawn import SpawnError

logger = logging.getLogger("tether.process")

REPORT_WAIT = 1.0
"""Seconds the group waits, at its exit, for the keeper's reports of its children's exits."""


class Keepers:
    """The keeper of one group (``current``), replaced whenever it is lost while the group
    is open (``is_open``); ``without`` runs once no keeper can be had."""

    def __init__(
        self,
        session: str,
        grace: float,
        mark: str,
        is_open: Callable[[], bool],
        without: Callable[[], Awaitable[None]],
    ) -> None:
        self.session = session
        self.grace = grace
        self.mark = mark
        """``TETHER_GROUP=<id>``: what every keeper of the group also stops."""
        self.current: Keeper | None = None
        self.lost = False
        """Whether a keeper was ever lost: its orphans are found by their mark from then on."""
        self._is_open = is_open
        self._without = without
        self._nursery: trio.Nursery | None = None

    @property
    def pid(self) -> int | None:
        """The pid of the keeper running now, if one does."""
        keeper = self.current
        return keeper.pid if keeper is not None and keeper.alive else None

    async def start(self, nursery: trio.Nursery) -> bool:
        """Start a keeper and serve it in ``nursery``; whether one runs."""
        self._nursery = nursery
        try:
            keeper = await Keeper.start(self.grace, self.mark)
        except KeeperUnavailable as exc:
            logger.warning("session %s: %s; the group has no keeper", self.session, exc)
            return False
        if not self._is_open():  # the group closed while it started
            with trio.CancelScope(shield=True):
                await keeper.close()
            return False
        keeper.on_lost = functools.partial(self._lost, keeper)
        self.current = keeper
        nursery.start_soon(keeper.serve, name=f"tether keeper {self.session}")
        return True

    async def spawn(
        self, argv: Sequence[str], path: str, args: Sequence[str], env: Mapping[str, str],
        fds: Mapping[int, int], label: str,
    ) -> Child | None:  # fmt: skip
        """Spawn through the keeper; the child, or ``None`` if no keeper runs (nothing was
        started: spawn in this process).

        Raises:
            KeeperUnresponsive: the keeper failed during the spawn.
            SpawnError: the keeper could not start the program.
        """
        keeper = self.current
        if keeper is None or not keeper.alive:
            return None
        try:
            ref = await keeper.spawn(argv[0], path, args, env, fds)
        except SpawnError as exc:  # gone before it was asked: nothing was started
            if isinstance(exc, KeeperUnresponsive) or exc.errno != errno.ECHILD:
                raise
            return None
        child = Child._create(ref, argv, label, self.grace, kept=True)  # its pidfd is open
        child.on_silent = functools.partial(self._silent, keeper)
        keeper.watch(child)
        await keeper.ack(child.pid)
        return child

    def _lost(self, keeper: Keeper) -> None:
        """A keeper is gone. At the group's close that is as it should be; before, it was
        killed: its children went to the nearest subreaper or init, their statuses come from
        the kernel, and another keeper is started."""
        if not self._is_open():
            return
        assert self._nursery is not None
        self.lost = True
        logger.error(
            "session %s: keeper pid %d died; starting another, which stops its processes by"
            " their mark",
            self.session,
            keeper.pid,
        )
        for child in keeper.unreported():
            self._nursery.start_soon(child.without_keeper)
        self._nursery.start_soon(self._replace, keeper)

    async def _replace(self, lost: Keeper) -> None:
        assert self._nursery is not None
        with trio.CancelScope(shield=True):
            await lost.close()  # it is dead: this reaps it
        if not self._is_open() or self.current is not lost:
            return
        if not await self.start(self._nursery) and self._is_open():
            await self._without()

    def _silent(self, keeper: Keeper, child: Child) -> None:
        why = f"pid {child.pid} exited and it said nothing for {REPORT_TIMEOUT:g}s"
        keeper.unresponsive(why)  # the child's own keeper (nothing if it is gone already)

    async def close(self, children: Sequence[Child]) -> None:
        """Wait (bounded) for the keeper's last reports of ``children``, then let it go."""
        keeper = self.current
        if keeper is None:
            return
        with trio.move_on_after(REPORT_WAIT):
            for child in children:
                if not child.done and keeper.alive:
                    await child.wait()
        await keeper.close()
        with trio.move_on_after(REPORT_WAIT):  # they were stopped: the kernel has the rest
            for child in keeper.unreported():
                await child.without_keeper()
