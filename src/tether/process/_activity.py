"""Whether a running tool advances, and how long it has not: its silence on an awake clock.

A tool advances when it writes output, when its tree burns CPU (utime + stime summed over the
tree), when the tree does I/O (``/proc/PID/io`` rchar + wchar) or when the tree changes (a
process starts or ends), and when a Python tool says so (``advance``). Silence is the awake
time since the last advance, so a host's sleep is never counted (``tether._clock``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .. import _procfs
from .._clock import Clock, HostClock


class ToolActivity:
    """The advances of one tool: when it last advanced, its largest silence, its last note."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock if clock is not None else HostClock()
        """The clock silence is measured on (awake time)."""
        self.started = self.clock.now()
        """When the tool started."""
        self.last = self.started
        """When it last advanced."""
        self.max_silence = 0.0
        """The largest silence between two advances (or up to ``finish``)."""
        self.note: str | None = None
        """What the tool last said of its progress (``advance(note)``)."""
        self.advances = 0
        """How many times it advanced."""
        self.tree: Callable[[], set[int]] = set
        """The tool's processes now (its tree and its marked orphans; none for a Python
        tool), for ``tether inspect``: set by the runner of a program tool."""
        self.look: Callable[[], bool] | None = None
        """Looks at the tool's tree once: whether it changed since the last look (set by the
        runner of a program tool; ``None`` for a Python tool, which says when it advances)."""
        self._looked = self.started

    def begin(self) -> None:
        """The tool's process exists from now: its silence starts here (its age still counts
        from the call). A spawn that was slow (a keeper stopped or starved, a loaded host) is
        not the tool's silence."""
        self.last = self.clock.now()

    def advance(self, note: str | None = None) -> None:
        """The tool made progress now."""
        now = self.clock.now()
        self.max_silence = max(self.max_silence, now - self.last)
        self.last = now
        self.advances += 1
        if note is not None:
            self.note = note

    def silence(self) -> float:
        """Awake seconds since the last advance."""
        return max(0.0, self.clock.now() - self.last)

    def look_now(self) -> None:
        """Look at the tool's tree (if it has one) and count a change as an advance."""
        if self.look is not None:
            self._looked = self.clock.now()
            if self.look():
                self.advance()

    def observed_silence(self) -> float:
        """The silence as last observed: up to the last look at the tree for a tool that has
        one, else up to now. What a harness reports: starved between two looks (a second
        apart), it never reports its own lateness as the tool's silence (a busy tool was called
        stalled on a loaded host), and reporting costs no look. A silent tool's reported
        silence lags the truth by a look's interval at most."""
        if self.look is None:
            return self.silence()
        return max(0.0, self._looked - self.last)

    def finish(self) -> float:
        """The tool is done: count its last silence too; the largest silence."""
        self.max_silence = max(self.max_silence, self.silence())
        return self.max_silence


class TreeProgress:
    """Reads a tool's tree and says whether it changed since the last look.

    Args:
        roots: the tree's roots now (the tool's process, and orphans of it that carry its
            mark); the tree is them and everything below them.
    """

    def __init__(self, roots: Callable[[], Iterable[int]]) -> None:
        self._roots = roots
        self._last: tuple[frozenset[_procfs.Identity], int, int] | None = None
        self.pids: set[int] = set()
        """The tree at the last look."""

    def sample(self) -> bool:
        """Look once; whether the tree, its CPU time or its I/O changed since the last look
        (the first look is not a change)."""
        roots = set(self._roots())
        pids = roots | _procfs.subtree(roots)
        idents: set[_procfs.Identity] = set()
        cpu = io = 0
        for pid in pids:
            fields = _procfs.stat_fields(pid)
            if fields is None:
                continue
            idents.add((pid, int(fields[19])))
            cpu += int(fields[11]) + int(fields[12])
            io += _io(pid)
        self.pids = {pid for pid, _ in idents}
        now = (frozenset(idents), cpu, io)
        changed = self._last is not None and now != self._last
        self._last = now
        return changed


def _io(pid: int) -> int:
    """rchar + wchar of ``pid`` (0 where ``/proc/PID/io`` cannot be read)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            lines = f.read().split(b"\n", 2)
        return int(lines[0].split()[1]) + int(lines[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class MarkedChildren:
    """The children of a parent whose environment carries one mark (``variable=value``): a
    tool's orphans, reparented to the group's keeper. Each process is read once."""

    def __init__(self, variable: str, value: str) -> None:
        self._needle = f"{variable}={value}".encode()
        self._seen: dict[_procfs.Identity, bool] = {}

    def of(self, parent: int) -> set[int]:
        found = set()
        for pid in _procfs.children(parent):
            ident = _procfs.identity(pid)
            if ident is None:
                continue
            marked = self._seen.get(ident)
            if marked is None:
                marked = self._marked(pid)
                if marked is not None:
                    self._seen[ident] = marked
            if marked:
                found.add(pid)
        return found

    def _marked(self, pid: int) -> bool | None:
        """Whether ``pid`` carries the mark; ``None`` while its environment reads empty (an
        instant after exec) or cannot be read."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            return None
        return (self._needle in environ.split(b"\0")) if environ else None
