"""``Keepers``: one group's use of the keeper its run shares (``KeeperHost``). If that
keeper is killed, the host starts another; the group's children it had spawned become orphans
elsewhere, so from then on the group also finds its processes by their mark (ADR 0031). While
no keeper runs (between a loss and its replacement, or when none can start), the group spawns
in this process."""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from .. import _backend
from ._child import REPORT_TIMEOUT, Child
from ._keeper import Keeper, KeeperUnavailable, KeeperUnresponsive
from ._keeper_host import KeeperHost
from ._proc import Stat
from ._spawn import SpawnError

logger = logging.getLogger("tether.process")

REPORT_WAIT = 1.0
"""Seconds the group waits, at its exit, for the keeper's reports of its children's exits."""


class Keepers:
    """One group's side of the shared keeper (``current``); ``without`` runs once no keeper
    can be had."""

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
        """``TETHER_GROUP=<id>``: how the keeper tells this group's processes."""
        self.lost = False
        """Whether a keeper was ever lost: its orphans are found by their mark from then on."""
        self._is_open = is_open
        self._without = without
        self._helpers: _backend.Helpers | None = None
        self._host: KeeperHost | None = None
        self._mine: list[Child] = []
        self._released = False

    @property
    def current(self) -> Keeper | None:
        """The keeper this group spawns through now, if it uses one."""
        return None if self._host is None or self._released else self._host.current

    @property
    def pid(self) -> int | None:
        """The pid of the keeper running now, if one does."""
        keeper = self.current
        return keeper.pid if keeper is not None and keeper.alive else None

    async def start(self, helpers: _backend.Helpers) -> bool:
        """Use the run's keeper (started if none runs); whether one does. ``helpers`` runs
        the group's tasks after the keeper's loss."""
        self._helpers = helpers
        host = KeeperHost.of_run()
        try:
            await host.join(self)
        except KeeperUnavailable as exc:
            logger.warning("session %s: %s; the group has no keeper", self.session, exc)
            return False
        if not self._is_open():  # the group closed while it started
            host.users.remove(self)
            return False
        self._host = host
        return True

    def sessions(self) -> set[int]:
        """The pids of the children spawned through the keeper: the sessions they lead."""
        return {child.pid for child in self._mine}

    def orphans(self, stats: Mapping[int, Stat], marked: Callable[[int], bool]) -> set[int]:
        """The keeper's children that are this group's: its own children, the orphans that
        lead or sit in their sessions or carry its mark (``marked``), and, while it is the
        keeper's only group, every other one."""
        keeper = self.pid
        if keeper is None or self._host is None:
            return set()
        others: set[int] = set()
        for user in self._host.users:
            if user is not self and isinstance(user, Keepers):
                others |= user.sessions()
        alone = all(user is self for user in self._host.users)
        mine = self.sessions()
        found: set[int] = set()
        for pid, stat in stats.items():
            if stat.ppid != keeper:
                continue
            ids = {pid, stat.session}
            if alone or (not ids & others and (ids & mine or marked(pid))):
                found.add(pid)
        return found

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
            ref = await keeper.spawn(argv[0], path, args, env, fds, self.mark)
        except SpawnError as exc:  # gone before it was asked: nothing was started
            if isinstance(exc, KeeperUnresponsive) or exc.errno != errno.ECHILD:
                raise
            return None
        child = Child._create(ref, argv, label, self.grace, kept=True)  # its pidfd is open
        child.on_silent = functools.partial(self._silent, keeper)
        self._mine.append(child)
        keeper.watch(child)
        await keeper.ack(child.pid)
        return child

    def keeper_lost(self, keeper: Keeper) -> None:
        """The shared keeper was killed: its children went to the nearest subreaper or init,
        so the group finds them by their mark from now on, even while it closes; while it is
        open, their statuses come from the kernel."""
        self.lost = True
        if not self._is_open():
            return
        assert self._helpers is not None
        logger.error("session %s: its keeper pid %d died", self.session, keeper.pid)
        for child in self._unreported(keeper):
            self._helpers.start_soon(child.without_keeper, name=f"tether status of {child.pid}")

    def without(self) -> None:
        """No keeper could replace the lost one: the group adopts its orphans itself."""
        if self._is_open() and self._helpers is not None and self._host is not None:
            self._helpers.start_soon(
                self._without, name=f"tether reaper of {self.session}"
            )  # (before, ``start`` says it has none)

    def _unreported(self, keeper: Keeper) -> list[Child]:
        mine = {id(child) for child in self._mine}
        return [child for child in keeper.unreported() if id(child) in mine]

    def _silent(self, keeper: Keeper, child: Child) -> None:
        why = f"pid {child.pid} exited and it said nothing for {REPORT_TIMEOUT:g}s"
        keeper.unresponsive(why)  # the child's own keeper (nothing if it is gone already)

    async def close(self, children: Sequence[Child]) -> None:
        """Wait (bounded) for the keeper's last reports of ``children``, have it kill what is
        left of the group, and stop using it (idempotent). A keeper that cannot (it died, or
        does not answer) leaves ``lost`` set: the group then stops its marked processes."""
        keeper = self.current
        if keeper is None or self._host is None:
            return
        with _backend.move_on_after(REPORT_WAIT):
            for child in children:
                if not child.done and keeper.alive:
                    await child.wait()
        killed = await keeper.release(self.mark)
        if killed is None:  # gone or mute: what it held went elsewhere, and nobody sweeps it
            self.lost = True
        elif killed:
            logger.warning("session %s: its keeper killed %d left behind", self.session, killed)
        self._released = True
        if self in self._host.users:
            self._host.users.remove(self)
        with _backend.move_on_after(REPORT_WAIT):  # they were stopped: the kernel has the rest
            for child in self._unreported(keeper):
                await child.without_keeper()
