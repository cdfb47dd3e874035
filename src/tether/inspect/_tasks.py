"""Every task of the running trio run, as rows a person or a program reads: its name, its parent
in the task tree (nurseries make the tree), the line of user code where it waits, and what it
waits on, described from the objects themselves (a channel's queue and holders, a lock's
owner, a sleep's deadline). Read on the trio thread, in one pass, without switching tasks."""

from __future__ import annotations

import linecache
import math
import os
import types
from collections.abc import Iterator
from typing import Any

import trio

from ._waits import Wait, WaitKind, await_chain, classify

SOURCE_CHARS = 160
"""Characters of a source line kept."""
ROOT_NAMES = ("<init>", "<TrioToken.run_sync_soon task>")
"""The run's own tasks: shown in the tree, their waits are trio's business."""


def walk() -> Iterator[tuple[trio.lowlevel.Task, trio.lowlevel.Task | None]]:
    """Each task of the run with its parent task (``None`` for the root), parents first."""
    root = trio.lowlevel.current_root_task()
    if root is None:
        return
    stack: list[tuple[trio.lowlevel.Task, trio.lowlevel.Task | None]] = [(root, None)]
    while stack:
        task, parent = stack.pop()
        yield task, parent
        children = [child for nursery in task.child_nurseries for child in nursery.child_tasks]
        children.sort(key=_by_name, reverse=True)
        stack.extend((child, task) for child in children)


def _by_name(task: trio.lowlevel.Task) -> tuple[str, int]:
    """Tasks in name order, ``worker-2`` before ``worker-10``."""
    head = task.name.rstrip("0123456789")
    tail = task.name[len(head) :]
    return head, int(tail) if tail else -1


def where(frame: types.FrameType | None) -> dict[str, Any] | None:
    """``{"file", "line", "function", "source"}`` of a frame (``None``: no frame)."""
    if frame is None:
        return None
    path, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(path, line).strip()[:SOURCE_CHARS]
    return {"file": shown_path(path), "line": line, "function": frame.f_code.co_name,
            "source": source}  # fmt: skip


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it is under it, as pytest shows paths
    (the deadlock reports use it too)."""
    here = os.getcwd() + os.sep
    return path[len(here) :] if path.startswith(here) else path


def row(
    task: trio.lowlevel.Task, running: trio.lowlevel.Task, deadlines: dict[int, float]
) -> dict[str, Any]:
    """One task: ``name``, ``where`` and ``wait`` (what it waits on; ``running`` for the task
    taking the snapshot). ``deadlines`` caches ``deadline_of`` for one snapshot."""
    if task is running:
        return {"name": task.name, "where": None, "wait": {"kind": "running", "on": "running"}}
    if task.name in ROOT_NAMES:  # trio's own: where they wait is trio's business
        return {"name": task.name, "where": None, "wait": {"kind": "trio", "on": "trio's run"}}
    frames = [frame for _, frame in await_chain(task)]
    wait = classify(task, frames)
    described = describe(wait, frames)
    # Only a sleep's deadline is its own; others are mostly a library's polling scope.
    deadline = deadline_of(task, deadlines) if wait.kind is WaitKind.SLEEP else math.inf
    if deadline != math.inf:
        described["deadline_in"] = round(deadline - trio.current_time(), 3)
    return {"name": task.name, "where": where(wait.frame), "wait": described}


def deadline_of(task: trio.lowlevel.Task, cache: dict[int, float]) -> float:
    """The earliest deadline of the cancel scopes around ``task`` up to the first shield (the
    ones that can wake it); ``inf`` if none, or if trio's layout cannot be read. ``cache``
    keeps each cancel status's answer, so sibling tasks cost one look."""
    status = getattr(task, "_cancel_status", None)
    path: list[tuple[object, float]] = []
    outer = math.inf
    while status is not None:
        cached = cache.get(id(status))
        if cached is not None:
            outer = cached
            break
        scope = getattr(status, "_scope", None)
        if scope is None:
            break
        path.append((status, scope.deadline))
        if scope.shield:
            break
        status = getattr(status, "_parent", None)
    for seen, deadline in reversed(path):  # outermost first: each sees what is outside it
        outer = cache[id(seen)] = min(outer, deadline)
    return outer


def describe(wait: Wait, frames: list[types.FrameType]) -> dict[str, Any]:
    """What ``wait`` is on, as JSON: ``kind`` (a ``WaitKind`` name, lower case), ``on`` (one
    phrase) and the object's own figures."""
    kind, obj = wait.kind, wait.obj
    out: dict[str, Any] = {"kind": kind.name.lower(), "on": kind.value}
    process = _subprocess(frames)
    if process is not None:
        out.update(kind="subprocess", on=f"a subprocess (pid {process})", pid=process)
    elif kind in (WaitKind.TETHER_RECEIVE, WaitKind.TETHER_SEND):
        out.update(_tether(obj, kind is WaitKind.TETHER_SEND))
    elif kind in (WaitKind.MEMORY_RECEIVE, WaitKind.MEMORY_SEND):
        stats = obj.statistics()
        out.update(queued=stats.current_buffer_used, capacity=_capacity(stats.max_buffer_size),
                   senders=stats.open_send_channels,
                   receivers=stats.open_receive_channels)  # fmt: skip
    elif kind is WaitKind.LOCK and obj is not None:
        owner = obj.statistics().owner
        out.update(owner=_task_name(owner, None))
    elif kind is WaitKind.CONDITION and obj is not None:
        owner = obj.statistics().lock_statistics.owner
        out.update(owner=_task_name(owner, None))
    elif kind is WaitKind.SEMAPHORE and obj is not None:
        out.update(value=obj.value, max_value=obj.max_value)
    elif kind is WaitKind.LIMITER and obj is not None:
        stats = obj.statistics()
        borrowers = [str(getattr(b, "name", b)) for b in list(stats.borrowed_tokens_by)[:5]]
        out.update(total=_capacity(stats.total_tokens), borrowed=stats.borrowed_tokens,
                   borrowers=borrowers)  # fmt: skip
    elif kind is WaitKind.NURSERY and obj is not None:
        out.update(children=len(obj.child_tasks))
    elif kind is WaitKind.SLEEP:
        out["on"] = "a sleep"
    return out


def _tether(state: Any, sending: bool) -> dict[str, Any]:
    """A tether channel: its name, queue, capacity and who holds its senders open."""
    stats = state.statistics() if hasattr(state, "statistics") else None
    out: dict[str, Any] = {"on": state.label, "channel": state.name}
    if stats is not None:
        out.update(queued=stats.buffered, capacity=_capacity(stats.capacity),
                   receivers=stats.receivers)  # fmt: skip
    holders = state.holders()
    out["holders"] = [{"name": h.name, "site": _site(h.site), "task": h.task}
                      for h in holders[:10]]  # fmt: skip
    out["senders"] = len(holders)
    if sending:
        out["on"] = f"{state.label} (its buffer is full, or it waits for the receiver)"
    return out


def _site(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{shown_path(path)}:{line}" if path else site


def _capacity(value: float) -> float | None:
    """A capacity as JSON: ``None`` for unbounded."""
    return None if value == math.inf else value


def _task_name(task: object, none: str | None = "nobody") -> str | None:
    return getattr(task, "name", none) if task is not None else none


_PROCESS_WAITS: set[types.CodeType] = set()


def _process_waits() -> set[types.CodeType]:
    """The code objects of waiting for a child process: trio's and tether's."""
    if not _PROCESS_WAITS:
        from ..process import Child

        _PROCESS_WAITS.update((trio.Process.wait.__code__, Child.wait.__code__))
    return _PROCESS_WAITS


def _subprocess(frames: list[types.FrameType]) -> int | None:
    """The pid a task waits for, if it waits in ``trio.Process.wait`` or ``Child.wait``."""
    codes = _process_waits()
    for frame in reversed(frames):
        if frame.f_code in codes:
            pid = getattr(frame.f_locals.get("self"), "pid", None)
            return pid if isinstance(pid, int) else None
    return None
