"""``KeeperHost``: the one keeper every ``ChildGroup`` of a run shares (ADR 0037), a trio run
or an asyncio loop.

A keeper is an interpreter of its own (~20 ms and ~10 MB to start), so one per group made the
n-th group cost as much as the first. The host starts a keeper when a group first needs one,
serves it from a system task (so it outlives the group that started it, and the next group
of the run finds it running), replaces it once if it is killed while groups use it, and
closes it when the run ends. A group stays the unit that is stopped: it releases its own
processes (``Keeper.release``) and leaves the others' running.
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol

import anyio
import anyio.lowlevel

from .. import _backend
from ._keeper import Keeper, KeeperUnavailable

logger = logging.getLogger("tether.process")


class User(Protocol):
    """A group's side of the shared keeper: told when it is lost, and when no other could
    be started."""

    mark: str
    grace: float

    def keeper_lost(self, keeper: Keeper) -> None: ...

    def without(self) -> None: ...


_HOST: anyio.lowlevel.RunVar[KeeperHost] = anyio.lowlevel.RunVar("tether_keeper")


class KeeperHost:
    """The keeper of this run's groups."""

    def __init__(self) -> None:
        self.current: Keeper | None = None
        self.users: list[User] = []
        """The groups using the keeper now, in the order they came."""
        self._starting = _backend.lock()

    @classmethod
    def of_run(cls) -> KeeperHost:
        """The host of the current run."""
        try:
            return _HOST.get()
        except LookupError:
            host = cls()
            _HOST.set(host)
            return host

    async def join(self, user: User) -> Keeper:
        """Add ``user`` to the groups of the running keeper (started if there is none), which
        stops its processes too if the owner dies; the keeper.

        Raises:
            KeeperUnavailable: none could be started (``user`` is not added).
        """
        self.users.append(user)  # first: a keeper lost from now on is replaced for it too
        try:
            async with self._starting:
                current = self.current
                if current is not None and current.alive:
                    await current.join(user.mark, user.grace)
                    return current
                return await self._start()
        except BaseException:
            self.users.remove(user)
            raise

    async def _start(self) -> Keeper:
        """A keeper for every group using one (hold ``_starting``), with their longest grace
        between its signals when the owner dies."""
        keeper = await Keeper.start(max(user.grace for user in self.users))
        keeper.on_lost = functools.partial(self._lost, keeper)
        self.current = keeper
        _backend.spawn_system_task(self._serve, keeper, name=f"tether keeper {keeper.pid}")
        for user in self.users:
            await keeper.join(user.mark, user.grace)
        return keeper

    async def _serve(self, keeper: Keeper) -> None:
        try:
            await keeper.serve()
        finally:  # the run ends (this task is cancelled), or the keeper is gone: reap it
            try:
                await _backend.shielded(keeper.close)
            except Exception:  # a system task must not raise: the run would crash
                logger.exception("closing keeper pid %d failed", keeper.pid)

    def _lost(self, keeper: Keeper) -> None:
        """The keeper is gone. If no group uses it (the run ends, or none is open) that is
        all; else it was killed: each group hears of it, and one successor is started."""
        if keeper is not self.current or not self.users:
            return
        logger.error(
            "keeper pid %d died; starting another, which stops its groups' processes by their mark",
            keeper.pid,
        )
        for user in list(self.users):
            user.keeper_lost(keeper)
        _backend.spawn_system_task(self._replace, keeper, name="tether keeper successor")

    async def _replace(self, lost: Keeper) -> None:
        try:
            async with self._starting:
                if self.current is not lost or not self.users:
                    return
                await self._start()
        except KeeperUnavailable as exc:
            logger.warning("no keeper could replace pid %d: %s", lost.pid, exc)
            for user in list(self.users):
                user.without()
