"""The text of a deadlock or a timeout: each task's line, what it waits on, and who holds that
now (found by reachability from each task's stack, not by where a handle was made)."""

from __future__ import annotations

import gc
import linecache
import os
import re
import types
from collections import Counter
from typing import Any

import trio

from ..inspect._tasks import shown_path
from ..inspect._waits import TRIO_DIR, WaitKind, classify, frame_of, library_dirs, user_frame
from ._reach import Reach, TooLarge, state_of
from ._threads import see_threads
from ._verdict import INTERNAL, OTHER_END, Blocked, Verdict

_HERE = os.path.dirname(__file__)
_ANYIO = os.path.join(os.sep, "anyio", "")
_SUFFIX = re.compile(r"#\d+$")


def where(frame: types.FrameType | None) -> str:
    """``file:line in function: source`` of a frame."""
    if frame is None:
        return "an unknown line"
    path, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(path, line).strip()
    return f"{shown_path(path)}:{line} in {frame.f_code.co_name}: {source}"


def shown(task: trio.lowlevel.Task, chain: list[Any]) -> bool:
    """Whether a report names this task: not the run's own, nor the test machinery's (a task
    of library code alone, started on ``lot.park`` or ``event.wait``, is named)."""
    if task.name in INTERNAL or not chain:
        return False
    paths = [frame_of(obj).f_code.co_filename for obj in chain]
    if all(p.startswith(TRIO_DIR) or _ANYIO in p for p in paths):
        return not _anyio_runner(chain)
    return not all(p.startswith((TRIO_DIR, _HERE)) or "pytest_trio" in p or "_pytest" in p
                   or _ANYIO in p for p in paths)  # fmt: skip


class Holders:
    """Which tasks reach an object, each task's reach computed once, on first question."""

    def __init__(self, chains: dict[trio.lowlevel.Task, list[Any]]) -> None:
        self._chains = chains
        self._names = display_names(chains)
        self._base = Reach([obj for chain in chains.values() for obj in chain], 400_000)
        self._reach: dict[trio.lowlevel.Task, Reach | None] = {}
        self._of: dict[int, list[str]] = {}
        self.unheld = False
        """Whether some object asked about is held by no task: by a global, a thread, or
        garbage the collector has not freed yet (the detector collects, then looks again)."""

    def close(self) -> None:
        """Let go of every object the reaches found: the report must not keep the program's
        objects alive once it is written."""
        for reach in self._reach.values():
            if reach is not None:
                reach.close()
        self._reach.clear()
        self._base.close()

    def of(self, obj: object) -> list[str]:
        if id(obj) not in self._of:
            self._of[id(obj)] = self._find(obj)
        return self._of[id(obj)]

    def _find(self, obj: object) -> list[str]:
        names = []
        for task, chain in self._chains.items():
            if task.name in INTERNAL:
                continue
            if task not in self._reach:
                reach: Reach | None = Reach((), 400_000, shared=self._base)
                try:
                    reach.add_chain(chain)  # type: ignore[union-attr]
                except TooLarge:
                    reach = None
                self._reach[task] = reach
            found = self._reach[task]
            if found is not None and obj in found:
                names.append(self.name(task))
        return names

    def name(self, task: trio.lowlevel.Task) -> str:
        """The task's name in this report (see ``display_names``)."""
        return self._names.get(task, task.name)

    def phrase(self, obj: object) -> str:
        names = self.of(obj)
        if not names:
            self.unheld = True
            return "no task (a global, a thread or garbage)"
        return ("task " if len(names) == 1 else "tasks ") + named(names)


def display_names(chains: dict[trio.lowlevel.Task, list[Any]]) -> dict[trio.lowlevel.Task, str]:
    """Each task's name in a report: a default name (``module.qualname``, as trio and anyio
    give one) is cut to its function's qualname past any ``<locals>``, and a name that several
    tasks share gets ``#1``, ``#2``... so a lock cycle between two tasks of one function reads
    which holds what."""
    base = {task: _short(task, chain) for task, chain in chains.items()}
    counts = Counter(base.values())
    seen: Counter[str] = Counter()
    names = {}
    for task, name in base.items():
        if counts[name] > 1:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        names[task] = name
    return names


def _anyio_runner(chain: list[Any]) -> bool:
    """Whether the task is anyio's pytest runner (the test runs inside it)."""
    if not chain:
        return False
    frame = frame_of(chain[0])
    runner = frame.f_locals.get("self")
    return type(runner).__name__ == "TestRunner" and _ANYIO in frame.f_code.co_filename


def _short(task: trio.lowlevel.Task, chain: list[Any]) -> str:
    if _anyio_runner(chain):  # named by the test it runs, as pytest-trio names its task
        libraries = library_dirs()
        for obj in chain:
            code = frame_of(obj).f_code
            if not code.co_filename.startswith(libraries):
                return f"<test {code.co_name!r}>"
    for obj in chain:  # anyio's wrapper coroutine comes first
        qualname = getattr(obj, "__qualname__", None)
        if isinstance(qualname, str) and task.name.endswith("." + qualname):
            return qualname.rsplit("<locals>.", 1)[-1]
    return task.name


def named(names: list[str], shown: int = 5) -> str:
    """Task names for a report, bounded: each distinct name once with its count, the first
    ``shown`` of them (2,000 tasks called ``worker`` make one entry, not 2,000)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    parts = [repr(n) if c == 1 else f"{n!r} (x{c})" for n, c in list(counts.items())[:shown]]
    rest = sum(list(counts.values())[shown:])
    return ", ".join(parts) + (f" and {rest} more" if rest else "")


def grouped(entries: list[tuple[str, list[str]]], shown: int = 40) -> list[str]:
    """Report lines for ``(task name, [its line, its details...])`` entries: tasks whose lines
    are the same make one entry naming how many they are; at most ``shown`` entries."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, lines in entries:
        groups.setdefault(tuple(lines), []).append(name)
    out: list[str] = []
    for same, names in list(groups.items())[:shown]:
        if len(names) > 1:  # counted by their shared name, not told apart
            names = [_SUFFIX.sub("", name) for name in names]
        who = (
            f"task {names[0]!r} waits"
            if len(names) == 1
            else (f"{len(names)} tasks ({named(names)}) wait")
        )
        out.append(f"  {who} at {same[0]}")
        out.extend(f"    {line}" for line in same[1:])
    if len(groups) > shown:
        left = sum(len(names) for names in list(groups.values())[shown:])
        out.append(f"  and {left} more tasks elsewhere")
    return out


def deadlock_report(
    verdict: Verdict, chains: dict[trio.lowlevel.Task, list[Any]], holders: Holders
) -> str:
    """The head line and every deadlocked task with what it waits on and who holds that
    (``holders`` answers who; the caller closes it)."""
    entries = [
        (holders.name(task), [where(blocked.wait.frame), *_detail(blocked, holders)])
        for task, blocked in verdict.stuck.items()
        if shown(task, chains[task])
    ]
    lines = grouped(entries)
    woken = (f"task {holders.name(t)!r}" for t in verdict.woken if shown(t, chains[t]))
    alive = [*verdict.running, *woken]
    if alive:
        others = ", ".join(alive[:4]) + (" ..." if len(alive) > 4 else "")
        count = sum(1 for t, b in verdict.stuck.items() if shown(t, chains[t]))
        tasks, them = ("task", "it") if count == 1 else ("tasks", "them")
        head = f"{count} {tasks} asleep for good: nothing that runs can wake {them}"
        lines.append(f"  still running, unable to reach them: {others}")
    else:
        head = "all tasks are asleep"
    return head + "\n" + ("\n".join(lines) if lines else "  (no task to show)")


def _detail(blocked: Blocked, holders: Holders) -> list[str]:
    wait = blocked.wait
    kind, obj = wait.kind, wait.obj
    out: list[str]
    if kind in (WaitKind.TETHER_RECEIVE, WaitKind.TETHER_SEND):
        out = _tether(kind, obj, holders)
    elif kind in OTHER_END:  # a trio memory channel's or an anyio memory stream's end
        end = OTHER_END[kind]
        ends = [h for h in gc.get_referrers(obj._state)
                if type(h).__name__ == end.other and not h._closed]  # fmt: skip
        side = "sender" if end.receives else "receiver"
        what = "channel" if end.trio else "stream"
        out = [f"on {kind.value}: open {side} held by {holders.phrase(h)}" for h in ends]
        out = out or [f"on {kind.value}: no open {side} (the {what} is never closed)"]
    elif kind is WaitKind.LOCK:
        owner = obj.statistics().owner
        out = [f"on {obj!r}: owned by task {holders.name(owner)!r}" if owner else f"on {obj!r}"]
    elif kind is WaitKind.LIMITER:
        names = named([str(getattr(b, "name", b)) for b in obj.statistics().borrowers])
        out = [f"on {obj!r}: borrowed by {names or 'nobody'}"]
    elif kind is WaitKind.THREAD:
        at = f", blocked at {where(obj.frame)}" if obj.frame else ""
        out = [f"in to_thread for thread {obj.name!r}{at}",
               f"on {obj.what}: nothing that runs reaches it"]  # fmt: skip
    elif kind is WaitKind.NURSERY:
        children = sorted(_SUFFIX.sub("", holders.name(c)) for c in obj.child_tasks)
        out = [f"for its nursery's children: {named(children)}"]
    elif kind is WaitKind.SLEEP:
        out = ["sleeping, and nothing that runs can cancel it"]
    elif obj is not None:
        out = [f"on {kind.value}: reachable only from {holders.phrase(obj)}"]
    else:
        out = [f"on {kind.value}"]
    deadline = blocked.scopes.deadline
    if deadline != float("inf"):
        out.append(f"its deadline (in {deadline - trio.current_time():.0f}s) cannot help: the "
                   "clock does not reach it before the test's timeout")  # fmt: skip
    return out


def _tether(kind: WaitKind, state: Any, holders: Holders) -> list[str]:
    from ..channels._handles import StrongHandle

    if kind is WaitKind.TETHER_SEND:
        ends = [h for h in gc.get_referrers(state) if state_of(h) is state and
                not isinstance(h, StrongHandle) and not hasattr(h, "upgrade")]  # fmt: skip
        out = [f"on {state.label}: its receiver is held by {holders.phrase(h)}" for h in ends]
        return out or [f"on {state.label}: no receiver"]
    from ..channels._permit import Permit

    out = [f"on {state.label}: an unsent Permit is held by {holders.phrase(p)}"
           for p in gc.get_referrers(state) if type(p) is Permit and not p._used]  # fmt: skip
    for handle in gc.get_referrers(state):
        key = getattr(handle, "_key", None)
        if not isinstance(handle, StrongHandle) or handle._shared is not state or key is None:
            continue
        record = state.live.get(key)
        if record is None:
            continue
        name, filename, line, _ = record
        out.append(f"on {state.label}: held by {name!r} made at {shown_path(filename)}:{line} in "
                   f"{holders.phrase(handle)}")  # fmt: skip
    return out or [f"on {state.label}: no live sender"]


def timeout_report(chains: dict[trio.lowlevel.Task, list[Any]]) -> str:
    """Every task's line, and for one on a tether channel, who holds its senders."""
    holders = Holders(chains)
    workers = {t.task: t for t in see_threads(set()) if t.task is not None}
    entries = []
    try:
        for task, chain in chains.items():
            if not shown(task, chain):
                continue
            frames = [frame_of(obj) for obj in chain]
            wait = classify(task, frames)
            lines = [where(user_frame(frames))]
            if wait.kind is WaitKind.TETHER_RECEIVE:
                lines.extend(_tether(wait.kind, wait.obj, holders))
            worker = workers.get(task) if wait.kind is WaitKind.THREAD else None
            if worker is not None:
                doing = f"blocked on {worker.what}" if worker.what else worker.state.value
                at = f" at {where(worker.frame)}" if worker.frame else ""
                lines.append(f"in to_thread for thread {worker.name!r}, {doing}{at}")
            entries.append((holders.name(task), lines))
    finally:
        holders.close()
        workers.clear()
    return "\n".join(grouped(entries)) or "  (no task to show)"
