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

import psutil
import trio

from ._child import Child
from ._proc import read_stat
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._spawn import SpawnError, spawn_process
from ._teardown import stop_processes, tree_of


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
        await trio.to_thread.run_sync(os.waitpid, pid, 0)
        raise SpawnError(argv[0], exc.errno or errno.EMFILE, f"{exc.strerror}; stopped") from exc
    child = Child._create(ref, argv, name or os.path.basename(argv[0]), grace)
    await trio.lowlevel.checkpoint()
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
    the whole stop takes one escalation, not one per root."""
    roots = list(roots)

    def collect() -> set[ProcessRef]:
        found: set[ProcessRef] = set()
        for root in roots:
            found |= tree_of(root)
        return found

    return await stop_processes(collect, roots, grace)


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
