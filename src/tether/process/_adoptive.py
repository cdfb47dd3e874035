"""``OrphanReaper``: a group's fallback when it has no keeper (not Linux, the keeper could not
start, or it was killed): the owner is the child subreaper, and the group's orphans, told from
other code's children by their mark, are adopted while they live and reaped when they die.

Its limits are why the keeper exists (ADR 0023): an orphan that dies before it is seen cannot be
told from another child and stays a zombie, and nothing survives the owner's own death.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from .. import _backend
from ._proc import Stat
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._table import marks, snapshot


class OrphanReaper:
    """The orphans of group ``group_id`` that were reparented to this process."""

    def __init__(self, group_id: str, sessions: Callable[[], set[int]], interval: float) -> None:
        self.group_id = group_id
        self.sessions = sessions
        """The sessions the group's children lead: their descendants are the group's too."""
        self.interval = interval
        self.active = False
        """Whether ``run`` reaps (from ``start`` to ``stop``)."""
        self._adopted: dict[int, ProcessRef] = {}

    def start(self) -> None:
        """Let ``run`` reap."""
        self.active = True

    async def run(self) -> None:
        """Adopt and reap once every ``interval`` until ``stop``."""
        while self.active:
            await _backend.sleep(self.interval)
            if self.active:
                self.reap_once()

    def reap_once(self) -> None:
        for pid in self.orphans(snapshot()):
            ref = self._adopted.get(pid)
            if ref is None:
                try:
                    ref = self._adopted[pid] = ProcessRef.of(pid)
                except ProcessLookupError:
                    continue
            if ref.state() == "Z":
                with contextlib.suppress(ChildProcessError):  # another waitpid(-1) got it
                    os.waitpid(pid, os.WNOHANG)
                del self._adopted[pid]

    def orphans(self, stats: dict[int, Stat]) -> set[int]:
        """This process's children that belong to the group but were not spawned by it."""
        me = os.getpid()
        sessions = self.sessions()
        found: set[int] = set()
        for pid, stat in stats.items():
            if stat.ppid != me or pid in SPAWNED:
                continue
            adopted = self._adopted.get(pid)
            if adopted is not None and adopted.state() is None:
                del self._adopted[pid]  # gone without us: its pid may be another's now
                adopted = None
            if adopted is not None or stat.session in sessions or self.marked(pid):
                found.add(pid)
        return found

    def marked(self, pid: int) -> bool:
        mark = marks(pid)
        return mark is not None and mark.group == self.group_id

    def stop(self) -> None:
        """Reap no more (the group's teardown reaps what is left)."""
        self.active = False
