"""A spawned child's standard streams: what ``stdin=``, ``stdout=`` and ``stderr=`` accept (as
``subprocess`` does), turned into the descriptors the child gets and the streams this process
keeps.

``PIPE`` makes a pipe: the child gets one end, this process a stream on the other (trio's
``FdStream`` under trio, ``tether.FdStream`` under asyncio: ``_fdstream``). ``DEVNULL`` is
``/dev/null``; ``STDOUT`` (for stderr) is whatever stdout is; a descriptor is used as it is;
``None`` is this process's own. The child's ends are closed here once it is spawned, so its
exit (and its descendants') is what ends the streams.
"""

from __future__ import annotations

import os
import subprocess

from .. import _fdstream

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT

Spec = int | None


class Stdio:
    """The three streams of one spawn, opened before it and settled after it."""

    def __init__(self, stdin: Spec, stdout: Spec, stderr: Spec) -> None:
        self.child_fds: dict[int, int] = {}
        """What the child gets: its descriptor number to ours (dup'ed into it at spawn)."""
        self.stdin: _fdstream.PipeStream | None = None
        self.stdout: _fdstream.PipeStream | None = None
        self.stderr: _fdstream.PipeStream | None = None
        self._close_after: list[int] = []
        try:
            self._open(0, stdin)
            self._open(1, stdout)
            if stderr == STDOUT:
                if 1 in self.child_fds:
                    self.child_fds[2] = self.child_fds[1]
            else:
                self._open(2, stderr)
        except BaseException:
            self.failed()
            raise

    def _open(self, target: int, spec: Spec) -> None:
        if spec is None:
            if _is_open(target):
                self.child_fds[target] = target
        elif spec == PIPE:
            read, write = os.pipe()
            theirs, ours = (read, write) if target == 0 else (write, read)
            self._close_after.append(theirs)
            self.child_fds[target] = theirs
            stream = _fdstream.fd_stream(ours)
            if target == 0:
                self.stdin = stream
            elif target == 1:
                self.stdout = stream
            else:
                self.stderr = stream
        elif spec == DEVNULL:
            fd = os.open(os.devnull, os.O_RDONLY if target == 0 else os.O_WRONLY)
            self._close_after.append(fd)
            self.child_fds[target] = fd
        elif spec == STDOUT:
            raise ValueError("STDOUT is for stderr only")
        elif spec >= 0:
            self.child_fds[target] = spec
        else:
            raise ValueError(f"not a stream: {spec!r} (PIPE, DEVNULL, STDOUT, a fd or None)")

    def pipe_fds(self) -> dict[str, int]:
        """This process's read ends of the child's output pipes, by stream name."""
        found = {}
        if self.stdout is not None:
            found["stdout"] = self.stdout.fileno()
        if self.stderr is not None:
            found["stderr"] = self.stderr.fileno()
        return found

    def spawned(self) -> None:
        """The child has its copies: close this process's copies of the child's ends."""
        for fd in self._close_after:
            os.close(fd)
        self._close_after.clear()

    def failed(self) -> None:
        """Nothing was spawned: close every descriptor opened here."""
        self.spawned()
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.stdin = self.stdout = self.stderr = None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
