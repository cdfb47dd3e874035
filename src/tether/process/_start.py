"""``start`` and ``stop_tree``: a child that no group owns, and stopping any tree by identity.

A supervisor that must outlive its own restarts (agentd) cannot hold its children in a
``ChildGroup``, whose exit stops them all. It starts them with ``start``, remembers their
``ProcessRef`` somewhere durable, and stops a tree with ``stop_tree`` when it decides to, with
the same escalation a group's exit uses.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterable, Mapping, Sequence

import anyio
import psutil

from .. import _backend
from ._child import Child
from ._proc import read_stat
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._spawn import SpawnError, spawn_process
from ._table import descendants, snapshot
from ._teardown import stop_processes


async def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    name: str | None = None,
    grace: float = 2.0,
    output: int | None = None,
) -> Child:
    """Start ``argv`` in its own session and process group, owned by no group.

    The caller answers for it: ``await child.wait()`` reaps it, ``await child.stop()`` stops
    its tree. ``output``, an open file descriptor, receives its stdout and stderr (stdin is
    then ``/dev/null``).

    Raises:
        SpawnError: the program cannot be executed, or this process has no descriptor to
            spare to watch it (``EMFILE``); nothing was left running.
    """
    full_env = dict(os.environ if env is None else env)
    pid = spawn_process(argv, full_env, None if cwd is None else os.fspath(cwd), output=output)
    try:
        ref = ProcessRef.of(pid)
    except OSError as exc:  # no descriptor to spare to read it: it cannot be watched
        os.kill(pid, signal.SIGKILL)  # our unreaped child: the pid is still its own
        await anyio.to_thread.run_sync(os.waitpid, pid, 0)
        raise SpawnError(argv[0], exc.errno or errno.EMFILE, f"{exc.strerror}; stopped") from exc
    child = Child._create(ref, argv, name or os.path.basename(argv[0]), grace)
    await _backend.checkpoint()
    return child


async def stop_tree(root: ProcessRef, grace: float) -> list[ProcessRef]:
    """Stop ``root`` and its descendants (SIGINT, SIGTERM + SIGCONT, SIGKILL, each after
    ``grace``) and reap the zombies that are ours; the processes still there at the end.

    ``root`` need not be our child: one adopted by identity after a restart is stopped just
    the same, and its zombie is left to its parent. Bounded by ``2 * grace + 1`` seconds.
    """
    return await stop_trees([root], grace)


async def stop_trees(roots: Iterable[ProcessRef], grace: float) -> list[ProcessRef]:
    """``stop_tree`` for several roots at once: each step reaches every tree together, so
    the whole stop takes one escalation, not one per root.

    Each pass reads the process table once for all the roots, in a worker thread, so a
    harness that left thousands of processes costs O(processes) per pass and never holds up
    the caller's other tasks (agentd keeps answering while it sweeps).
    """
    roots = list(roots)
    known: dict[int, ProcessRef] = {}

    def collect() -> set[ProcessRef]:
        stats = snapshot()
        live = {root for root in roots if root.pid in stats and root.matches(stats[root.pid])}
        found = set(live)
        for pid in descendants(stats, [root.pid for root in live]):
            ref = known.get(pid)
            if ref is None or not ref.matches(stats[pid]):
                try:
                    ref = known[pid] = ProcessRef.of(pid)
                except ProcessLookupError:
                    continue
            found.add(ref)
        return found

    return await stop_processes(collect, roots, grace, in_thread=True)


def reap(ref: ProcessRef) -> int | None:
    """If ``ref`` has exited and is our child, reap it; its exit status (``-signo`` if a
    signal killed it), else ``None``. Not a checkpoint.

    A child started through tether is reaped through its ``Child``, which keeps the status.
    """
    child = SPAWNED.get(ref.pid)
    if child is not None:
        return child.poll()
    if ref.state() != "Z" or ref.ppid() != os.getpid():
        return None
    try:
        pid, status = os.waitpid(ref.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if pid else None


def reap_orphans() -> list[tuple[int, int]]:
    """Reap our zombie children that no ``Child`` answers for; ``(pid, status)`` of each.

    Only for a process that owns every child it has, such as a subreaper daemon: the status
    is taken from whoever else might have waited for it.
    """
    me = os.getpid()
    reaped: list[tuple[int, int]] = []
    for pid in _children(me):
        stat = read_stat(pid)
        if stat is None or stat.state != "Z" or stat.ppid != me or pid in SPAWNED:
            continue
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done:
            reaped.append((pid, os.waitstatus_to_exitcode(status)))
    return reaped


def _children(me: int) -> set[int]:
    """This process's children: from ``/proc/self/task/*/children`` (one small file per
    thread) where the kernel has it, else by scanning the whole process table."""
    found: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                found.update(int(pid) for pid in f.read().split())
    except OSError:
        return {child.pid for child in psutil.Process(me).children()}
    return found
