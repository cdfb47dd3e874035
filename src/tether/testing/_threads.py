"""``see_threads``: what each thread of the process is doing, read from its stack, so that a
thread blocked in a known primitive counts as asleep on that primitive, not as running code.

A thread is *idle* (a trio cache worker with no job), *parked* (in ``trio.from_thread``,
waiting for a task to answer), *blocked* (with no timeout in ``threading.Condition.wait``,
which ``Event``, ``Semaphore``, ``Barrier``, ``queue.Queue`` and ``concurrent.futures`` all
wait in, or in ``Lock``/``RLock.acquire``, ``with lock`` or ``SimpleQueue.get`` called from
Python) or *running*. Whatever the stack does not prove blocked counts as running: a miss,
never a false alarm. A worker of ``trio.to_thread.run_sync`` names the task waiting for it.
"""

from __future__ import annotations

import builtins
import dis
import enum
import os
import queue
import sys
import threading
import types
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from ..inspect._waits import library_dirs

TRIO_DIR = os.path.dirname(trio.__file__)
_FUTURES = os.path.join("concurrent", "futures", "")
_LOCKS = (type(threading.Lock()), type(threading.RLock()))


class ThreadState(enum.Enum):
    """What a thread is doing, as far as its stack shows."""

    IDLE = "idle"
    """A trio cache worker with no job: it runs nothing until running code hands it one."""
    PARKED = "parked"
    """In ``trio.from_thread``, waiting for a task to answer it."""
    BLOCKED = "blocked"
    """In a known primitive with no timeout: only code that reaches ``obj`` can wake it."""
    RUNNING = "running"


@attrs.frozen(eq=False)
class SeenThread:
    """One thread, as its stack showed it when it was looked at."""

    name: str
    ident: int
    state: ThreadState
    roots: list[object]
    """The ``Thread`` object and the locals of every frame it is running."""
    module_state: list[dict[str, Any]]
    """The globals of the code on its stack: the module state it can touch."""
    obj: Any = None
    """The primitive it is blocked on (``BLOCKED``): a ``Condition``, a lock, a queue."""
    what: str = ""
    """That wait, for a report (``queue.Queue.get``)."""
    frame: types.FrameType | None = None
    """The innermost frame outside the stdlib's primitives and trio: the line a report names."""
    task: trio.lowlevel.Task | None = None
    """The task waiting for it in ``trio.to_thread.run_sync``, if it is such a worker."""


def see_threads(skip: set[int]) -> list[SeenThread]:
    """Every thread but the calling one and those in ``skip`` (by ident). The frames are let go
    of before returning: the caller must not keep a cycle through this analysing stack."""
    frames = sys._current_frames()
    frames.pop(threading.get_ident(), None)
    seen: list[SeenThread] = []
    try:
        for thread in threading.enumerate():
            ident = thread.ident or 0
            if ident in skip or ident == threading.get_ident():
                continue
            stack = _stack(frames.get(ident))
            seen.append(_see(thread, stack))
            stack.clear()
    finally:
        frames.clear()
    return seen


def _see(thread: threading.Thread, stack: list[types.FrameType]) -> SeenThread:
    ident = thread.ident or 0
    if _idle_cache_worker(thread, stack):
        return SeenThread(thread.name, ident, ThreadState.IDLE, [], [])
    roots: list[object] = [thread, *(value for frame in stack for value in _locals(frame))]
    module_state = _module_state(stack, roots)
    task = _to_thread_task(stack)
    if _parked_on_trio(stack):
        return SeenThread(thread.name, ident, ThreadState.PARKED, roots, module_state, task=task)
    frame = next((f for f in stack if not _library(f.f_code.co_filename)), None)
    blocked = _blocked_on(stack, ident)
    if blocked is None:
        return SeenThread(thread.name, ident, ThreadState.RUNNING, roots, module_state,
                          frame=frame, task=task)  # fmt: skip
    obj, what = blocked
    return SeenThread(thread.name, ident, ThreadState.BLOCKED, roots, module_state, obj, what,
                      frame, task)  # fmt: skip


def _module_state(stack: list[types.FrameType], roots: list[object]) -> list[dict[str, Any]]:
    """The module state a thread's code touches: its frames' globals, the state of the modules
    those name, and the globals of the functions it holds or those name (a callback it was
    handed). One step, not the closure: that would be every module (see ``Reach``)."""
    doors = {id(vars(m)) for m in _DOORS}
    first = {id(f.f_globals): f.f_globals for f in stack if id(f.f_globals) not in doors}
    found = dict(first)
    for value in [*(v for d in first.values() for v in list(d.values())), *roots]:
        if isinstance(value, types.ModuleType):
            state = vars(value)
        elif isinstance(value, types.FunctionType):
            state = value.__globals__
        else:
            continue
        if id(state) not in doors:
            found.setdefault(id(state), state)
    return list(found.values())


_DOORS = (sys, builtins, threading)
"""Modules whose state leads everywhere: ``sys.modules`` to every module, ``threading``'s
registry to every thread's target and arguments (which no thread's code calls)."""


def _stdlib_wait(path: str) -> bool:
    """Whether ``path`` is the stdlib's ``threading``, ``queue`` or ``concurrent.futures``."""
    return path in (threading.__file__, queue.__file__) or _FUTURES in path


def _library(path: str) -> bool:
    """trio's, tether's, the wrappers' (``outcome``) and the stdlib primitives' code."""
    return path.startswith(library_dirs()) or _stdlib_wait(path)


def _blocked_on(stack: list[types.FrameType], ident: int) -> tuple[Any, str] | None:
    """The primitive the thread is blocked in for good (no timeout) and its name, or ``None``."""
    if not stack:
        return None
    inner = stack[0]
    if inner.f_code is _CONDITION_WAIT:
        names = inner.f_locals
        condition, waiter = names.get("self"), names.get("waiter")
        if names.get("timeout") is not None or waiter is None or not waiter.locked():
            return None  # a timeout wakes it, or it was notified and is taking the lock back
        if waiter not in getattr(condition, "_waiters", ()):
            return None
        outer = inner  # the public call it came through: Event.wait, Queue.get
        for frame in stack[1:]:
            if not _stdlib_wait(frame.f_code.co_filename):
                break
            if frame.f_code.co_varnames[:1] == ("self",):
                outer = frame
        owner = outer.f_locals.get("self")
        return condition, f"{type(owner).__module__}.{type(owner).__qualname__}." + (
            outer.f_code.co_name
        )
    return _called_from_python(inner, ident)


def _called_from_python(frame: types.FrameType, ident: int) -> tuple[Any, str] | None:
    """A lock's ``acquire()`` or ``with lock``, or a ``SimpleQueue``'s ``get()``, with no
    arguments, that ``frame`` is blocked in (a C call, so the frame is the caller's)."""
    found = _call_at(frame.f_code, frame.f_lasti)
    if found is None:
        return None
    method, loads = found
    obj = _resolve(frame, loads)
    if method == "get":
        if type(obj) is queue.SimpleQueue and obj.empty():
            return obj, "queue.SimpleQueue.get"
        return None
    held = repr(obj) if isinstance(obj, _LOCKS) else ""
    if not held.startswith("<locked") or f"owner={ident} " in held:
        return None  # not a lock, released while we looked, or an RLock it owns: it takes it
    kind = "Lock" if isinstance(obj, _LOCKS[0]) else "RLock"
    return obj, f"threading.{kind}.acquire"


_LOCAL_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF")
_LOADS = (*_LOCAL_LOADS, "LOAD_GLOBAL", "LOAD_NAME")
_CALLS: dict[tuple[types.CodeType, int], tuple[str, list[tuple[str, str]]] | None] = {}


def _call_at(code: types.CodeType, lasti: int) -> tuple[str, list[tuple[str, str]]] | None:
    """The method and the plain load chain of the call at ``lasti`` (cached per code object):
    ``obj.acquire()``, ``self.lock.acquire()``, ``with lock:``, ``q.get()``."""
    key = (code, lasti)
    if key not in _CALLS:
        _CALLS[key] = _parse_call(code, lasti)
    return _CALLS[key]


def _parse_call(code: types.CodeType, lasti: int) -> tuple[str, list[tuple[str, str]]] | None:
    ops = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL")]
    at = next((n for n, i in enumerate(ops) if i.offset == lasti), None)
    if at is None:
        return None
    if ops[at].opname == "BEFORE_WITH":
        method, end = "acquire", at
    elif ops[at].opname == "CALL" and ops[at].arg == 0:
        attr = ops[at - 1] if at else None
        if attr is None or attr.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
            return None
        if attr.argval not in ("acquire", "get"):
            return None
        method, end = str(attr.argval), at - 1
    else:
        return None
    loads: list[tuple[str, str]] = []
    for instruction in reversed(ops[:end]):
        if instruction.opname == "LOAD_ATTR":
            loads.append(("attr", str(instruction.argval)))
            continue
        if instruction.opname in _LOADS:
            loads.append((instruction.opname, str(instruction.argval)))
            loads.reverse()
            return method, loads
        return None
    return None


def _resolve(frame: types.FrameType, loads: list[tuple[str, str]]) -> Any:
    """The object a plain load chain names in ``frame``, read without running any code (an
    attribute is read from an instance's or a module's ``__dict__`` only), or ``None``."""
    (op, name), attrs_ = loads[0], loads[1:]
    if op in _LOCAL_LOADS:
        obj = frame.f_locals.get(name)
    else:
        builtins = frame.f_builtins
        obj = frame.f_globals.get(name, builtins.get(name))
    for _, attr in attrs_:
        try:
            obj = vars(obj).get(attr)
        except TypeError:
            return None
    return obj


def _to_thread_task(stack: list[types.FrameType]) -> trio.lowlevel.Task | None:
    """The task that waits in ``trio.to_thread.run_sync`` for this worker (read from the
    ``worker_fn`` frame trio runs the job in), or ``None``."""
    for frame in stack:
        code = frame.f_code
        if code.co_name == "worker_fn" and code.co_filename.startswith(TRIO_DIR):
            register = frame.f_locals.get("task_register")
            task = register[0] if isinstance(register, list) and register else None
            return task if isinstance(task, trio.lowlevel.Task) else None
    return None


def _stack(frame: types.FrameType | None) -> list[types.FrameType]:
    """A thread's frames, innermost first."""
    found = []
    while frame is not None:
        found.append(frame)
        frame = frame.f_back
    return found


def _locals(frame: types.FrameType) -> Iterable[object]:
    """A running frame's local values (a module-level frame's are its module's state, which
    the thread's ``module_state`` has). On 3.11 and 3.12 this materialises ``f_locals``, a
    snapshot a trace function could later write back: reading is all done here."""
    names = frame.f_locals
    if names is frame.f_globals:
        return ()
    return list(names.values())


def _parked_on_trio(stack: list[types.FrameType]) -> bool:
    """Whether the thread waits in ``trio.from_thread`` for the trio side to answer: its
    ``_send_message_to_trio`` frame is blocked in the queue's ``get`` (a ``SimpleQueue``'s,
    in C, or a ``Queue``'s, waiting on its condition). Anywhere else in there it may still be
    handing its function to trio, or holding the answer, and counts as running."""
    for index, frame in enumerate(stack):
        code = frame.f_code
        if code.co_name != "_send_message_to_trio" or not code.co_filename.startswith(TRIO_DIR):
            continue
        if index == 0:  # blocked in the C ``SimpleQueue.get`` itself
            return (_call_at(code, frame.f_lasti) or ("",))[0] == "get"
        inner, innermost = stack[index - 1], stack[0]
        return (
            inner.f_code.co_name == "get"
            and inner.f_code.co_filename == queue.__file__
            and innermost.f_code.co_name == "wait"
            and innermost.f_code.co_filename == threading.__file__
        )
    return False


def _idle_cache_worker(thread: threading.Thread, stack: list[types.FrameType]) -> bool:
    """Whether the thread is a worker of trio's thread cache with no job (no ``_handle_job``
    frame of its own on its stack)."""
    worker = getattr(getattr(thread, "_target", None), "__self__", None)
    if type(worker).__module__ != "trio._core._thread_cache":
        return False
    return not any(
        frame.f_code.co_name == "_handle_job" and frame.f_locals.get("self") is worker
        for frame in stack
    )


_CONDITION_WAIT = threading.Condition.wait.__code__
