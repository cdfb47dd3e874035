"""Who holds a pipe open for writing: the processes that keep a tool's output from ending.

A tool's own process can exit while a backgrounded grandchild still holds its stdout, and a
reader then waits for an end of file that never comes. The pipe's inode names it in every
``/proc/PID/fd`` link (``pipe:[INODE]``); the link's ``fdinfo`` flags tell a write end.
"""

from __future__ import annotations

import os

import attrs

from ._ref import ProcessRef


@attrs.frozen
class PipeHolder:
    """A process that held a write end of a tool's output pipe after the tool exited."""

    pid: int
    """The holder's process id (it was stopped)."""
    cmdline: str
    """Its command line, space-separated."""
    stream: str
    """``stdout`` or ``stderr``."""
    ref: ProcessRef | None = attrs.field(default=None, eq=False, repr=False)
    """Its identity, while it could be read (``None`` if it was gone by then)."""

    def describe(self) -> str:
        """``pid=N cmd=... holds its stdout``: the line logged and recorded."""
        return f"pid={self.pid} cmd={self.cmdline} holds its {self.stream}"


def pipe_holders(pipes: dict[str, int]) -> list[PipeHolder]:
    """Every other process holding a write end of the pipes whose read ends ``pipes`` are
    here (by stream name); a blocking scan of ``/proc``: run it in a thread."""
    inodes = {os.fstat(fd).st_ino: name for name, fd in pipes.items()}
    me = os.getpid()
    found: list[PipeHolder] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        stream = _holds(int(entry), inodes)
        if stream is None:
            continue
        try:
            ref = ProcessRef.of(int(entry))
        except ProcessLookupError:
            continue
        found.append(PipeHolder(ref.pid, " ".join(ref.cmdline() or ["?"]), stream, ref))
    return found


def _holds(pid: int, inodes: dict[int, str]) -> str | None:
    """The stream whose pipe ``pid`` has open for writing, if any."""
    base = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(base)
    except OSError:
        return None
    for fd in fds:
        try:
            link = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if not link.startswith("pipe:["):
            continue
        stream = inodes.get(int(link[6:-1]))
        if stream is not None and _writable(pid, fd):
            return stream
    return None


def _writable(pid: int, fd: str) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    except (OSError, ValueError):
        pass
    return True  # unreadable flags: a descriptor on the pipe is enough to suspect it
