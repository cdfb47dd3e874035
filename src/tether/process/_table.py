"""A snapshot of the process table: who is whose child, and which processes carry a marker.

One pass over ``/proc`` per snapshot (psutil's ``children(recursive=True)`` makes one per
call), so a teardown of hundreds of processes stays cheap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import attrs
import psutil

from .. import _procfs
from ._proc import Stat, has_arguments, read_stat, user_process
from ._ref import ProcessRef

SESSION_VAR = "TETHER_SESSION"
EPOCH_VAR = "TETHER_EPOCH"
GROUP_VAR = "TETHER_GROUP"
HOST_VAR = "TETHER_HOST"
STORE_VAR = "TETHER_STORE_ID"
INHERITED = (HOST_VAR, STORE_VAR)
"""Marks a ``ChildGroup`` passes on from its owner's environment to every child."""


def snapshot() -> dict[int, Stat]:
    """The stat of every process visible now."""
    stats: dict[int, Stat] = {}
    for pid in psutil.pids():
        stat = read_stat(pid)
        if stat is None:
            stat = _stat_from_psutil(pid)
        if stat is not None:
            stats[pid] = stat
    return stats


def _stat_from_psutil(pid: int) -> Stat | None:
    try:
        process = psutil.Process(pid)
        zombie = process.status() == psutil.STATUS_ZOMBIE
        return Stat("Z" if zombie else "R", process.ppid(), os.getpgid(pid), os.getsid(pid), 0)
    except (psutil.Error, OSError):
        return None


def descendants(stats: dict[int, Stat], roots: Iterable[int]) -> set[int]:
    """The pids below ``roots`` (not the roots themselves)."""
    return _procfs.below(roots, {pid: stat.ppid for pid, stat in stats.items()})


@attrs.frozen
class Mark:
    """The tether variables a process started with."""

    session: str
    epoch: str
    group: str | None
    """The ``ChildGroup`` that spawned it or an ancestor: unlike session and epoch, never in
    the owner's own environment, so other code's children in the owner do not carry it."""
    host: str | None = None
    """The host id of the daemon that started the session's harness (several daemons acting
    as hosts can share one machine; a twin is only a twin on its own host)."""
    store: str | None = None
    """The id of the store whose daemon started the session's harness: two daemons with
    separate stores may both run a session of the same name, and neither's is the other's."""


def marks(pid: int) -> Mark | None:
    """The tether marks in the environment ``pid`` started with, if it has a session mark."""
    try:
        raw = _read_environ(pid)
        env = dict(
            entry.decode(errors="replace").partition("=")[::2]
            for entry in raw.split(b"\0")
            if entry.startswith(b"TETHER_")
        )
    except FileNotFoundError:
        try:
            env = psutil.Process(pid).environ()
        except psutil.Error:
            return None
    except OSError:  # not ours to read, or gone
        return None
    session = env.get(SESSION_VAR)
    if session is None:
        return None
    return Mark(
        session, env.get(EPOCH_VAR, ""), env.get(GROUP_VAR), env.get(HOST_VAR), env.get(STORE_VAR)
    )


_EXEC_WAIT = 0.2
_ARGS_GRACE = 0.002


def _read_environ(pid: int) -> bytes:
    """``/proc/PID/environ``, waiting for a process caught inside ``execve`` to get its new
    environment, so a twin spawned a moment ago is seen.

    ``Popen`` returns once the close-on-exec pipe closes, before the kernel lays out the new
    image's arguments and environment; until then both read empty. The wait ends after
    ``_EXEC_WAIT`` seconds, or ``_ARGS_GRACE`` once the arguments are there (a program
    started with an empty environment costs a scan that much).
    """
    raw = _environ_once(pid)
    if raw or not user_process(pid):
        return raw
    started = time.monotonic()
    while not raw:
        waited = time.monotonic() - started
        if waited > _EXEC_WAIT or (waited > _ARGS_GRACE and has_arguments(pid)):
            break
        time.sleep(0.0002)
        raw = _environ_once(pid)
    return raw


def _environ_once(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


def refs(pids: Iterable[int]) -> set[ProcessRef]:
    """Identity refs for the pids that still exist."""
    found: set[ProcessRef] = set()
    for pid in pids:
        try:
            found.add(ProcessRef.of(pid))
        except ProcessLookupError:
            continue
    return found
