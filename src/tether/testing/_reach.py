"""``Reach``: the objects that running code could get its hands on, found by following
references the way ordinary code does, without crossing into another task's stack.

Roots are coroutines (a task's await chain: its locals and the value stack, read through
``gc.get_referents``, which never materialises ``f_locals``), threads and functions. A function
is followed through its closure and defaults, not its module: a task's code can import
anything, so module state is added as a whole (``add_globals``) when a task runs at all. A
thread adds the module state its stack names (``add_thread``), not every module: followed
further, module state leads to every module (a module's spec to its loader to pytest's
session), so any background thread would hide every deadlock on a global. Tasks, other tasks'
coroutines, trio's runner, classes and code objects are not followed: holding a task does not
let ordinary code touch its locals. A cancel scope or nursery is noted (holding one lets code
cancel it) and not followed further.
"""

from __future__ import annotations

import enum
import gc
import os
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any

import trio
import trio.testing

from ._threads import SeenThread

TRIO_DIR = os.path.dirname(trio.__file__)
_LEAF = frozenset({int, float, complex, str, bytes, bool, type(None), bytearray, range})
_OPAQUE: frozenset[type] = frozenset({types.ModuleType, types.CodeType, trio.lowlevel.Task,
                                      trio.lowlevel.TrioToken})  # fmt: skip


ANYIO_STREAMS = ("MemoryObjectSendStream", "MemoryObjectReceiveStream")
"""anyio's memory object stream ends, counted as channel ends once anyio's streams are loaded."""


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

    def __init__(self, stop: Iterable[object], limit: int, *, shared: Reach | None = None) -> None:
        """``shared``: a Reach whose stop set and module dicts this one reads (not copies)."""
        self.limit = limit
        self._stop: set[int] = shared._stop if shared else {id(obj) for obj in stop}
        self._own: set[int] = set()
        """ids of the chain added, which the stop set must not stop."""
        self._seen: set[int] = set()
        self._keep: list[object] = []  # keeps every id valid while the analysis runs
        self._module_dicts: set[int] = (
            shared._module_dicts
            if shared
            else {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
        )
        self._opaque = _OPAQUE | _trio_opaque()
        self._open_types = False
        self.scopes: set[int] = set()
        """ids of the cancel scopes reached (directly or through a nursery)."""
        self.handles: list[Any] = []
        """Channel endpoints reached: tether handles and trio memory channels."""
        self._handle_types = _handle_types()
        self._is_ref: dict[type, _Weak] = {}
        self.unfollowed = ""
        """What reachable object could lead further than the analysis can follow (``""``:
        nothing): a deadlock is then never declared."""

    def __contains__(self, obj: object) -> bool:
        return id(obj) in self._seen

    def close(self) -> None:
        """Let go of everything reached, once the verdict is in: the analysis must keep none of
        the program's objects alive (a sender kept past its last use holds its channel open)."""
        self._keep.clear()
        self.handles.clear()
        self._seen = set()
        self.scopes = set()

    def add_chain(self, chain: Iterable[object]) -> None:
        """A task's await chain (its coroutines): each one's locals and stack."""
        roots = list(chain)
        self._own.update(id(obj) for obj in roots)
        self.add(roots)

    def add_globals(self) -> None:
        """Every module's state, classes included: what any running code can import."""
        self._open_types = True
        self._module_dicts = set()  # its own: another Reach may share the old one
        self.add([vars(m) for m in list(sys.modules.values()) if m is not None])

    def add_thread(self, thread: SeenThread) -> None:
        """What a thread's code can touch: its ``Thread`` object, its frames' locals, and the
        module state ``thread.module_state`` names, with classes open; never every module: a
        library's background thread does not reach a test's registry."""
        self._open_types = True
        state = {id(d) for d in thread.module_state}
        self._module_dicts = self._module_dicts - state  # its own: another Reach may share it
        self.add(thread.roots)
        self.add(thread.module_state)

    def add(self, roots: Iterable[object]) -> None:
        stack: list[Any] = list(roots)
        seen, keep, stop, own = self._seen, self._keep, self._stop, self._own
        opaque, module_dicts, handle_types = self._opaque, self._module_dicts, self._handle_types
        scope_type, nursery_type, is_ref = trio.CancelScope, trio.Nursery, self._is_ref
        while stack:
            obj = stack.pop()
            kind = type(obj)
            if kind in _LEAF:
                continue
            key = id(obj)
            if key in seen or (key in stop and key not in own):
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
            weak = is_ref.get(kind)
            if weak is None:
                weak = is_ref[kind] = _weak_kind(kind)
            if weak is _Weak.REF:
                stack.append(obj())  # what code holding the reference can get back
            elif weak is _Weak.PROXY:
                self.unfollowed = "a weak proxy (weakref.proxy), which it cannot follow"
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
    from ..channels._broadcast import BroadcastReceiver, BroadcastSender
    from ..channels._mpsc import Sender, WeakSender
    from ..channels._oneshot import OneshotReceiver, OneshotSender
    from ..channels._permit import Permit
    from ..channels._receiver import Receiver
    from ..channels._watch import WatchReceiver, WatchSender

    tether = {Sender, WeakSender, Receiver, OneshotSender, OneshotReceiver, WatchSender,
              WatchReceiver, BroadcastSender, BroadcastReceiver, Permit}  # fmt: skip
    memory = sys.modules.get("anyio.streams.memory")
    found = (getattr(memory, name, None) for name in ANYIO_STREAMS)
    anyio = {kind for kind in found if isinstance(kind, type)}
    return frozenset({*tether, *anyio, trio.MemorySendChannel, trio.MemoryReceiveChannel})


class _Weak(enum.Enum):
    """How a type holds another object weakly."""

    NO = enum.auto()
    REF = enum.auto()
    PROXY = enum.auto()


def _weak_kind(kind: type) -> _Weak:
    if issubclass(kind, weakref.ref):
        return _Weak.REF
    if issubclass(kind, weakref.ProxyTypes):
        return _Weak.PROXY
    return _Weak.NO
