"""The watcher of ``tether run``: a detached process that stops what ``tether run`` leaves if
``tether run`` itself is killed (SIGKILL, the OOM killer), when nothing of its own can run.

It is double-forked before ``tether run`` becomes a subreaper, so it is nobody's child there:
``tether run``'s tree stays the shape tini's is (``tether run``, CMD, CMD's own). It holds a
pidfd of ``tether run`` and a pipe on which ``tether run`` reports its children as they come
and go (``+ pid start`` / ``- pid start``, ``bye`` at a clean exit). When the pidfd says
``tether run`` died without ``bye``, the watcher stops the reported children still alive, all
their descendants, and every process carrying the run's mark, SIGTERM first, SIGKILL after
``grace`` (ADR 0023). With ``--die-with-parent`` it also holds a pidfd of the process that
started ``tether run`` and stops the same processes when that one dies (ADR 0056); ``tether
run`` then sees CMD end and exits as it would.
"""

from __future__ import annotations

import os
import sys

from .. import _procfs
from .._procfs import Identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal  # without its enums: see tether._procfs


class Watcher:
    """``tether run``'s side: start the watcher, and report to it."""

    def __init__(self, write: int) -> None:
        self._write = write
        self._reported: set[Identity] = set()

    @classmethod
    def start(
        cls, grace: float, mark: tuple[str, str], parent: int | None = None
    ) -> Watcher | None:
        """Fork the watcher (twice, so it is not this process's child); ``None`` if that
        fails (logged by the caller: ``tether run`` then goes on without one). ``parent``: a
        pidfd of the process whose death stops CMD's tree too (``--die-with-parent``)."""
        try:
            pidfd = os.pidfd_open(os.getpid())
        except OSError:
            return None
        read, write = os.pipe()
        try:
            first = os.fork()
        except OSError:
            for fd in (pidfd, read, write):
                os.close(fd)
            return None
        if first == 0:
            try:
                os.close(write)
                if os.fork() == 0:
                    _watch(pidfd, read, grace, mark, parent)
            finally:
                os._exit(0)
        os.close(pidfd)
        os.close(read)
        os.waitpid(first, 0)
        return cls(write)

    def report(self, children: set[Identity]) -> None:
        """Tell the watcher which processes are this process's children now."""
        lines = [f"+ {pid} {start}\n" for pid, start in children - self._reported]
        lines += [f"- {pid} {start}\n" for pid, start in self._reported - children]
        if lines:
            self._reported = set(children)
            self._send("".join(lines))

    def bye(self) -> None:
        """A clean exit: the watcher exits without touching anything."""
        self._send("bye\n")
        try:
            os.close(self._write)
        except OSError:
            pass

    def _send(self, text: str) -> None:
        try:
            os.write(self._write, text.encode())
        except OSError:
            pass  # the watcher is gone: nothing to tell


def _watch(pidfd: int, read: int, grace: float, mark: tuple[str, str], parent: int | None) -> None:
    """The watcher's life: wait for ``tether run`` to end; stop what it left if it died, and
    what it runs if ``parent`` (a pidfd) dies first."""
    import select  # here, not in ``tether run``'s start-up

    os.setsid()
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    children: set[Identity] = set()
    buffer = b""
    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    poll.register(read, select.POLLIN)
    if parent is not None:
        poll.register(parent, select.POLLIN)
    closed = False
    while True:
        ready = {fd for fd, _ in poll.poll()}
        if read in ready and not closed:
            data = os.read(read, 65536)
            if not data:
                closed = True
                poll.unregister(read)
            buffer += data
            *lines, rest = buffer.split(b"\n")
            buffer = rest
            for line in lines:
                if line == b"bye":
                    return
                sign, pid, start = line.split()
                ident = (int(pid), int(start))
                (children.add if sign == b"+" else children.discard)(ident)
        if pidfd in ready:
            _stop(children, grace, mark, "the run died before its command's processes")
            return
        if parent is not None and parent in ready:
            poll.unregister(parent)
            parent = None
            _stop(children, grace, mark, "the process that started it died")


def _stop(children: set[Identity], grace: float, mark: tuple[str, str], why: str) -> None:
    def collect() -> set[Identity]:
        procs = _procfs.table()
        roots = {pid for pid, start in children if _procfs.state((pid, start)) is not None}
        pids = roots | _procfs.descendants(roots, procs) | _procfs.marked(*mark)
        return _procfs.identities(pids)

    found = collect()
    if found:
        print(
            f"tether run: {why}; stopping {len(found)} processes",
            file=sys.stderr,
            flush=True,
        )
    steps = ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0))
    _procfs.escalate(collect, steps)
