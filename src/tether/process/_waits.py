"""What each process of a stalled tool waits on, for the line that announces the stall.

Per process: its state (``/proc/PID/stat``), the kernel function it sleeps in
(``/proc/PID/wchan``: ``pipe_read``, ``do_wait``, ``hrtimer_nanosleep``...) and, when it is
blocked reading (``/proc/PID/syscall``), the descriptor it reads and what that is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from .. import _procfs

_READS = {
    "x86_64": {0: "read", 17: "pread64", 19: "readv", 45: "recvfrom", 47: "recvmsg"},
    "aarch64": {63: "read", 65: "readv", 67: "pread64", 207: "recvfrom", 212: "recvmsg"},
}.get(os.uname().machine, {})
"""Syscalls whose first argument is the descriptor read, on this machine."""


def waits(pids: Iterable[int]) -> list[str]:
    """One line per live process: ``pid=N state=S wchan=F [in read(fd N: what)] cmd=...``."""
    lines = []
    for row in processes(pids):
        line = f"pid={row['pid']} state={row['state']} wchan={row['wchan']}"
        if row["reading"] is not None:
            line += f" {row['reading']}"
        lines.append(f"{line} cmd={row['cmd']}")
    return lines


def processes(pids: Iterable[int]) -> list[dict[str, Any]]:
    """One row per live process, by pid: ``pid``, ``ppid``, ``state``, ``wchan`` (``?``
    unreadable), ``reading`` (``None``: not blocked reading) and ``cmd``."""
    rows = []
    for pid in sorted(pids):
        fields = _procfs.stat_fields(pid)
        if fields is None:
            continue
        rows.append({"pid": pid, "ppid": int(fields[1]), "state": fields[0],
                     "wchan": _read(pid, "wchan") or "?", "reading": _reading(pid),
                     "cmd": _procfs.cmdline(pid)})  # fmt: skip
    return rows


def _read(pid: int, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _reading(pid: int) -> str | None:
    """``in read(fd N: pipe:[...])`` if ``pid`` is blocked reading a descriptor."""
    syscall = _read(pid, "syscall")
    if syscall is None:
        return None
    parts = syscall.split()
    try:
        name = _READS.get(int(parts[0]))
        fd = int(parts[1], 16)
    except (IndexError, ValueError):
        return None
    if name is None:
        return None
    try:
        what = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        what = "?"
    return f"in {name}(fd {fd}: {what})"
