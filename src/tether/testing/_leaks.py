"""The process-leak guard: a test that leaves a process behind (alive or a zombie, however deep
or however escaped) fails, naming each one, and the next test starts clean.

The pytest process makes itself a child subreaper first, so a process that escapes with a
double fork, ``setsid`` or ``nohup`` is reparented to it, where the guard sees it, instead of to
init, where nothing would.
"""

from __future__ import annotations

import contextlib
import os

import attrs
import psutil

from ..process import become_subreaper

SETTLE = 2.0
"""Seconds a test's processes get to finish exiting (and be reaped by their owners)."""


@attrs.frozen
class Leak:
    """One process a test left behind."""

    pid: int
    """The leaked process's pid."""
    cmdline: str
    """Its command line."""
    status: str
    """Its state when found (``zombie``, ``sleeping``, ...)."""

    def describe(self) -> str:
        return f"pid={self.pid} status={self.status} cmd={self.cmdline}"


def descendants() -> set[int]:
    """The pids of every descendant of this process, zombies included."""
    try:
        return {child.pid for child in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


class LeakGuard:
    """``before()`` at a test's start, ``after()`` at its end: the leaks, killed and reaped."""

    def __init__(self) -> None:
        become_subreaper()
        self._before: set[int] = set()

    def before(self) -> None:
        self._before = descendants()

    def after(self) -> list[Leak]:
        started = [_process(pid) for pid in descendants() - self._before]
        processes = [p for p in started if p is not None]
        if not processes:
            return []
        # Exiting processes and their owners' reaping get a moment; zombies of ours do not
        # need it (nobody else will reap them).
        alive = [p for p in processes if _status(p) not in (None, psutil.STATUS_ZOMBIE)]
        _, alive = psutil.wait_procs(alive, timeout=SETTLE)
        zombies = [p for p in processes if _status(p) == psutil.STATUS_ZOMBIE]
        leaks = [_leak(p) for p in [*alive, *zombies]]
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(alive, timeout=SETTLE)
        for process in [*alive, *zombies]:
            _reap(process.pid)
        return [leak for leak in leaks if leak is not None]


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _status(process: psutil.Process) -> str | None:
    try:
        return str(process.status())
    except psutil.Error:
        return None


def _leak(process: psutil.Process) -> Leak | None:
    status = _status(process)
    if status is None:
        return None
    try:
        cmdline = " ".join(process.cmdline()) or f"[{process.name()}]"
    except psutil.Error:
        cmdline = "?"
    return Leak(process.pid, cmdline, status)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
