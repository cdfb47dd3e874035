"""``Reach``: the objects that running code could get its hands on, found by following
references the way ordinary code does, without crossing into another task's stack.

Roots are coroutines (a task's await chain: its locals and the value stack, read through
``gc.get_referents``, which never materialises ``f_locals``), threads and functions. A function
is followed through its closure and defaults, not its module: module state is reachable by
everyone, so it is added as a whole (``add_globals``) when any code runs at all. Tasks, other
tasks' coroutines, trio's runner, classes and code objects are not followed: holding a task does
not let ordinary code touch its locals. A cancel scope or nursery is noted (holding one lets
code cancel it) and not followed further.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
from collections.abc import Iterable
from typing import Any

import trio
import trio.testing

_LEAF = frozenset({int, float, complex, str, bytes, bool, type(None), bytearray, range})
_OPAQUE: frozenset[type] = frozenset({types.ModuleType, types.CodeType, trio.lowlevel.Task,
                                      trio.lowlevel.TrioToken})  # fmt: skip


class TooLarge(Exception):
    """The reachable graph is larger than the limit: the analysis cannot tell."""


def _trio_opaque() -> frozenset[type]:
    """trio's run internals (found through its public objects, so a missing one costs only a
    longer walk)."""
    run = sys.modules.get("trio._core._run")
    names = ("Runner", "CancelStatus", "_TaskStatus")  # a task_status gives no nursery away
    return frozenset(t for t in (getattr(run, name, None) for name in names) if isinstance(t, type))


class Reach:
    """Everything reachable from the roots added so far; ``id(obj) in reach`` asks."""

    def __init__(self, stop: Iterable[object], limit: int) -> None:
        self.limit = limit
        self._stop = {id(obj) for obj in stop}
        self._seen: set[int] = set()
        self._keep: list[object] = []  # keeps every id valid while the analysis runs
        self._module_dicts = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
        self._opaque = _OPAQUE | _trio_opaque()
        self._open_types = False
        self.scopes: set[int] = set()
        """ids of the cancel scopes reached (directly or through a nursery)."""
        self.handles: list[Any] = []
        """Channel endpoints reached: tether handles and trio memory channels."""
        self._handle_types = _handle_types()

    def __contains__(self, obj: object) -> bool:
        return id(obj) in self._seen

    def add_chain(self, chain: Iterable[object]) -> None:
        """A task's await chain (its coroutines): each one's locals and stack."""
        roots: list[object] = []
        for obj in chain:
            self._stop.discard(id(obj))
            roots.append(obj)
        self.add(roots)

    def add_globals(self) -> None:
        """Every module's state, classes included: what any running code can import."""
        self._open_types = True
        self._module_dicts.clear()
        self.add([vars(m) for m in list(sys.modules.values()) if m is not None])

    def add_threads(self, skip: set[int]) -> list[str]:
        """Each thread but those in ``skip`` (by ident), through its ``Thread`` object (target,
        arguments, attributes); the names of those that count as running code."""
        names = []
        frames = sys._current_frames()
        for thread in threading.enumerate():
            if thread.ident in skip or thread.ident == threading.get_ident():
                continue
            job = _trio_job(thread, frames.get(thread.ident or 0))
            if job is None:
                continue  # an idle worker of trio's thread cache: it runs nothing
            names.append(thread.name)
            self.add([thread, *job])
        return names

    def add(self, roots: Iterable[object]) -> None:
        stack: list[Any] = list(roots)
        seen, keep, stop = self._seen, self._keep, self._stop
        opaque, module_dicts, handle_types = self._opaque, self._module_dicts, self._handle_types
        scope_type, nursery_type = trio.CancelScope, trio.Nursery
        while stack:
            obj = stack.pop()
            kind = type(obj)
            if kind in _LEAF:
                continue
            key = id(obj)
            if key in seen or key in stop:
                continue
            seen.add(key)
            keep.append(obj)
            if len(seen) > self.limit:
                raise TooLarge(f"more than {self.limit:,} objects are reachable")
            if kind in opaque:
                continue
            if kind is types.FunctionType:
                stack.extend(c.cell_contents for c in obj.__closure__ or () if _full(c))
                stack.extend(obj.__defaults__ or ())
                stack.extend((obj.__kwdefaults__ or {}).values())
                continue
            if isinstance(obj, type):
                if self._open_types:
                    stack.extend(gc.get_referents(obj))
                continue
            if kind is scope_type:
                self.scopes.add(key)
                continue
            if kind is nursery_type:
                self.scopes.add(id(obj.cancel_scope))
                continue
            if kind is dict and key in module_dicts:
                continue
            if kind in handle_types:
                self.handles.append(obj)
            stack.extend(gc.get_referents(obj))


def state_of(handle: Any) -> Any:
    """The shared state a channel endpoint belongs to (a tether handle's or a trio memory
    channel's), or ``None``."""
    for name in ("_shared", "_chan", "_state"):
        state = getattr(handle, name, None)
        if state is not None:
            return state
    return None


def _full(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _handle_types() -> frozenset[type]:
    from ..channels._mpsc import Sender, WeakSender
    from ..channels._oneshot import OneshotReceiver, OneshotSender
    from ..channels._receiver import Receiver
    from ..channels._watch import WatchReceiver, WatchSender

    tether = {Sender, WeakSender, Receiver, OneshotSender, OneshotReceiver, WatchSender,
              WatchReceiver}  # fmt: skip
    return frozenset({*tether, trio.MemorySendChannel, trio.MemoryReceiveChannel})


def _trio_job(thread: threading.Thread, frame: types.FrameType | None) -> list[object] | None:
    """What a thread of trio's thread cache runs (``fn`` and ``deliver``, held only by the
    frame that runs them), ``[]`` for any other thread, ``None`` for an idle worker."""
    worker = getattr(getattr(thread, "_target", None), "__self__", None)
    if type(worker).__module__ != "trio._core._thread_cache":
        return []
    while frame is not None:
        if frame.f_code.co_name == "_handle_job" and frame.f_locals.get("self") is worker:
            return list(frame.f_locals.values())
        frame = frame.f_back
    return None
