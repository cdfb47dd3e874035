"""Every task of the running asyncio loop, as the rows ``snapshot()`` reads under asyncio: its
name, the line of user code where it waits (from its coroutine chain, innermost last) and what
it waits on: a tether channel (named, with its queue and the holders of its senders), a child
process, a sleep, another task, or a future. asyncio keeps no task tree before Python 3.14, so
the tasks are listed flat, in name order. Read on the loop's thread, in one pass, without
switching tasks."""

from __future__ import annotations

import asyncio
import os
import types
from collections.abc import Iterator
from typing import Any

from ._tasks import _subprocess, _tether, where
from ._waits import _frame, user_frame

_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep
_SLEEP = asyncio.sleep.__code__


def current() -> asyncio.Task[Any] | None:
    """The task taking the snapshot."""
    return asyncio.current_task()


def walk() -> Iterator[tuple[asyncio.Task[Any], None]]:
    """Each task of the running loop, in name order, none with a parent."""
    tasks = sorted(asyncio.all_tasks(), key=lambda task: (task.get_name(), id(task)))
    for task in tasks:
        yield task, None


def chain(task: asyncio.Task[Any]) -> list[types.FrameType]:
    """The frames of the task's coroutine chain, outermost first."""
    frames: list[types.FrameType] = []
    obj: Any = task.get_coro()
    while obj is not None:
        frame = _frame(obj)
        if frame is None:
            break
        frames.append(frame)
        obj = (
            getattr(obj, "cr_await", None)
            or getattr(obj, "gi_yieldfrom", None)
            or getattr(obj, "ag_await", None)
        )
    return frames


def row(task: asyncio.Task[Any], running: asyncio.Task[Any] | None) -> dict[str, Any]:
    """One task: ``name``, ``where`` and ``wait`` (``running`` for the task taking the
    snapshot)."""
    name = task.get_name()
    if task is running:
        return {"name": name, "where": None, "wait": {"kind": "running", "on": "running"}}
    frames = chain(task)
    mine = [frame for frame in frames if not frame.f_code.co_filename.startswith(_ASYNCIO_DIR)]
    return {"name": name, "where": where(user_frame(mine)), "wait": _wait(task, frames)}


def _wait(task: asyncio.Task[Any], frames: list[types.FrameType]) -> dict[str, Any]:
    waiter = getattr(task, "_fut_waiter", None)  # what the task awaits now (asyncio's field)
    state = getattr(waiter, "custom_sleep_data", None)
    if state is not None and hasattr(state, "holders"):  # parked on a tether channel
        sending = getattr(waiter, "_waiters", None) is getattr(state, "send_tasks", ())
        kind = "tether_send" if sending else "tether_receive"
        return {"kind": kind, **_tether(state, sending)}
    pid = _subprocess(frames)
    if pid is not None:
        return {"kind": "subprocess", "on": f"a subprocess (pid {pid})", "pid": pid}
    if any(frame.f_code is _SLEEP for frame in frames):
        return {"kind": "sleep", "on": "a sleep"}
    if isinstance(waiter, asyncio.Task):
        return {"kind": "task", "on": f"task {waiter.get_name()!r}"}
    if waiter is None:
        return {"kind": "ready", "on": "its turn to run"}
    return {"kind": "future", "on": "a future"}
