"""The process table read straight from ``/proc``, and a blocking stop of a set of processes,
with nothing but the standard library.

For the programs that must start in milliseconds and never import trio: the keeper of a
``ChildGroup``, ``tether run`` and its watcher. ``tether.process`` has the async, identity-
checked versions the library uses; these keep the same rules (a process is named by its pid
and its start time in clock ticks, so a reused pid is never signalled).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # ``collections.abc`` and ``typing`` cost start-up time
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Collection, Iterable
    from typing import Any
else:
    import _signal as signal  # the C module behind ``signal``, without its enums (4 ms)

CATCHABLE = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
"""Every signal a process can block, catch or reset (the C library's reserved ones are not
among the valid ones)."""
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1

Identity = tuple[int, int]
"""``(pid, start)``: a process, by its pid and its start time in clock ticks after boot."""


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].decode().split()


def identity(pid: int) -> Identity | None:
    fields = stat_fields(pid)
    return None if fields is None else (pid, int(fields[19]))


def state(ident: Identity) -> str | None:
    """The one-letter state of the process ``ident`` names, or ``None`` once it is gone."""
    fields = stat_fields(ident[0])
    if fields is None or int(fields[19]) != ident[1]:
        return None
    return fields[0]


def table() -> dict[int, tuple[str, int, int, int]]:
    """Every process now: pid to ``(state, ppid, pgrp, start)``."""
    found: dict[int, tuple[str, int, int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields is not None:
                found[int(name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[19]))
    return found


def identities(pids: Iterable[int]) -> set[Identity]:
    """The identities of those of ``pids`` that still run (or are zombies)."""
    return {ident for pid in pids if (ident := identity(pid)) is not None}


def descendants(roots: Collection[int], procs: dict[int, tuple[str, int, int, int]]) -> set[int]:
    """The pids below ``roots`` in ``procs`` (not the roots themselves)."""
    return below(roots, {pid: ppid for pid, (_, ppid, _, _) in procs.items()})


def below(roots: Iterable[int], parents: dict[int, int]) -> set[int]:
    """The pids below ``roots`` (not the roots themselves), given each pid's parent."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    return walk(roots, lambda pid: kids.get(pid, ()))


def subtree(roots: Iterable[int]) -> set[int]:
    """The pids below ``roots`` now, read from their ``children`` files (no table scan)."""
    return walk(roots, children)


def walk(roots: Iterable[int], kids: Callable[[int], Iterable[int]]) -> set[int]:
    """Everything below ``roots`` (not the roots themselves), given each pid's children."""
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in kids(stack.pop()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def children(pid: int) -> set[int]:
    """The children of ``pid``, from its tasks' ``children`` files."""
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    found.update(int(child) for child in f.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return found


def marked(variable: str, value: str) -> set[int]:
    """Pids whose environment has ``variable=value`` (zombies have none left)."""
    return marked_any([f"{variable}={value}"])


def marked_any(marks: Collection[str]) -> set[int]:
    """Pids whose environment has any of ``marks`` (``VARIABLE=value``), in one pass."""
    needles = {mark.encode() for mark in marks if mark}  # "" would match every environment
    found: set[int] = set()
    if not needles:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needles.intersection(f.read().split(b"\0")):
                    found.add(int(name))
        except OSError:
            continue
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    except OSError:
        return "?"


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; whether the kernel allowed it."""
    call = _PRCTL or _bind_prctl()
    return call is not None and bool(call(option, value, 0, 0, 0) == 0)


_PRCTL: Any = None


def _bind_prctl() -> Any:
    """libc's ``prctl`` through ``_ctypes``, the C module under ``ctypes``: importing
    ``ctypes`` itself costs 2 ms, a fifth of the interpreter's start-up."""
    global _PRCTL
    try:
        import _ctypes

        c: Any = _ctypes  # its stubs type what ``ctypes`` passes it, not these stand-ins

        class Libc:
            _handle = c.dlopen(None)  # libc, already loaded

        class Int(c._SimpleCData):  # type: ignore[misc]
            _type_ = "i"

        class Call(c.CFuncPtr):  # type: ignore[misc]
            _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        _PRCTL = Call(("prctl", Libc()))
    except (ImportError, OSError, AttributeError):
        return None
    return _PRCTL


def signal_ident(ident: Identity, sig: int) -> bool:
    """Send ``sig`` to the process ``ident`` names, if it is still that process: the pidfd is
    opened first and the identity checked after, so a reused pid is never signalled."""
    try:
        pidfd = os.pidfd_open(ident[0])
    except OSError:
        return False
    try:
        if state(ident) is None:
            return False
        signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        return False
    finally:
        os.close(pidfd)
    return True


def escalate(
    collect: Callable[[], set[Identity]],
    steps: Iterable[tuple[int, float]],
    reap: Callable[[], object] = lambda: None,
) -> set[Identity]:
    """Send each ``(signal, wait)`` step to every process ``collect()`` names (re-read before
    each step, so forks and orphans meanwhile are caught), each process group too, then wait
    up to ``wait`` for all of them to be gone (``reap`` runs while waiting: a parent reaps its
    zombies there). SIGCONT follows SIGTERM to stopped processes, so they can obey. What is left."""
    targets: set[Identity] = set()
    for sig, wait in steps:
        targets = {t for t in targets | collect() if state(t) not in (None, "Z")}
        if not targets:
            return set()
        groups = {int(f[2]) for t in targets if (f := stat_fields(t[0])) is not None}
        for target in targets:
            stopped = state(target) == "T"
            signal_ident(target, sig)
            if stopped and sig == signal.SIGTERM:
                signal_ident(target, signal.SIGCONT)
        for pgrp in groups:
            if any(t[0] == pgrp for t in targets):  # only groups one of ours leads
                try:
                    os.killpg(pgrp, sig)
                except OSError:
                    continue
        deadline = time.monotonic() + wait
        delay = 0.001
        while time.monotonic() < deadline:
            reap()
            if all(state(t) in (None, "Z") for t in targets):
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
    reap()
    return {t for t in targets | collect() if state(t) not in (None, "Z")}


def reap_all() -> list[tuple[int, int]]:
    """Reap every exited child of this process; ``(pid, exit code)`` of each (``-signo`` for a
    signal). Only for a process that owns every child it has (an init, a keeper)."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, os.waitstatus_to_exitcode(status)))


_ALIASES = ("SIGCLD", "SIGIOT", "SIGPOLL")
NAMES = {
    getattr(signal, name): name
    for name in dir(signal)
    if name.startswith("SIG") and not name.startswith("SIG_") and name not in _ALIASES
}
"""Signal numbers to their names (``signal.Signals`` without importing ``enum``)."""


def signal_name(sig: int) -> str:
    return NAMES.get(sig, f"signal {sig}")


def signal_number(text: str) -> int:
    """The number of a signal given by number or name (``15``, ``TERM``, ``SIGTERM``).

    Raises:
        ValueError: it names no signal.
    """
    text = text.strip().upper()
    if text.isdigit():
        if int(text) not in signal.valid_signals():
            raise ValueError(f"{text} is not a signal number here")
        return int(text)
    name = text if text.startswith("SIG") else f"SIG{text}"
    for number, known in NAMES.items():
        if known == name:
            return int(number)
    raise ValueError(f"{text!r} is not a signal")
