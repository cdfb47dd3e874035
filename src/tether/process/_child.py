"""``Child``: one process a ``ChildGroup`` started: waited for through a pidfd if it is this
process's own child, or told of its exit by the group's keeper, which is its parent."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import final

import trio

from .._util import NoPublicConstructor
from ._proc import pidfd_open
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._teardown import stop_processes, tree_of

logger = logging.getLogger("tether.process")


@final
class Child(metaclass=NoPublicConstructor):
    """A process started by ``ChildGroup.spawn``: the leader of its own session and group."""

    def __init__(
        self, ref: ProcessRef, argv: Sequence[str], name: str, grace: float, *, kept: bool = False
    ) -> None:
        self.ref = ref
        self.argv = tuple(argv)
        self.name = name
        self.grace = grace
        self.returncode: int | None = None
        """The exit status once reaped: the code, or ``-signo`` if a signal killed it."""
        self.stdin: trio.lowlevel.FdStream | None = None
        """With ``stdin=PIPE``: the child's standard input (a ``trio.abc.SendStream``)."""
        self.stdout: trio.lowlevel.FdStream | None = None
        """With ``stdout=PIPE``: the child's standard output (a ``trio.abc.ReceiveStream``)."""
        self.stderr: trio.lowlevel.FdStream | None = None
        """With ``stderr=PIPE``: the child's standard error (a ``trio.abc.ReceiveStream``)."""
        self.pipes: dict[str, int] = {}
        """The read ends of its output pipes here, by stream name (to find their holders)."""
        self._kept = kept
        """Whether the group's keeper is its parent (and reports its exit)."""
        self._reported = trio.Event()
        self._pidfd: int | None = None
        self._watching = False
        self._watch_done = trio.Event()
        if not kept:
            try:
                self._pidfd = pidfd_open(ref.pid)
            except ProcessLookupError:  # pragma: no cover - our unreaped child cannot vanish
                self._pidfd = None
            SPAWNED[ref.pid] = self

    @property
    def pid(self) -> int:
        """The child's pid (also its process group and session id)."""
        return self.ref.pid

    def __repr__(self) -> str:
        state = "running" if self.returncode is None else f"exited {self.returncode}"
        return f"<tether.Child {self.name!r} pid={self.pid} {state}>"

    def poll(self) -> int | None:
        """Reap the child if it has exited; its ``returncode`` or ``None``. Not a checkpoint."""
        if self.returncode is not None or self._kept:
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            # Reaped by someone else (SIGCHLD ignored, or a waitpid(-1) elsewhere): the status
            # is lost. Like subprocess, call it 0, but say so.
            logger.warning("child %s was reaped by someone else; exit status lost", self.pid)
            self._reaped(0)
            return 0
        if pid == 0:
            return None
        self._reaped(os.waitstatus_to_exitcode(status))
        return self.returncode

    def close_streams(self) -> None:
        """Close whichever of ``stdin``, ``stdout`` and ``stderr`` are open here."""
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()

    def _reaped(self, code: int) -> None:
        self.returncode = code
        self._reported.set()
        SPAWNED.pop(self.pid, None)
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)  # a task in wait() sees it and re-checks
            os.close(self._pidfd)
            self._pidfd = None

    async def wait(self) -> int:
        """Wait for the child to exit, reap it and return its ``returncode``.

        Cancel safety: safe; the child is untouched and a later ``wait`` still works.
        """
        if self._kept:
            await self._reported.wait()
            assert self.returncode is not None
            return self.returncode
        while self.returncode is None:
            if self._watching:
                await self._watch_done.wait()
                continue
            self._watching = True
            self._watch_done = trio.Event()
            try:
                await self._exited()
            except trio.ClosedResourceError:
                pass  # another task reaped the child and closed the pidfd
            finally:
                self._watching = False
                self._watch_done.set()
            self.poll()
        await trio.lowlevel.checkpoint()
        return self.returncode

    async def _exited(self) -> None:
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
            return
        delay = 0.001
        while self.ref.state() not in (None, "Z"):
            await trio.sleep(delay)
            delay = min(delay * 2, 0.1)

    def send_signal(self, sig: int) -> bool:
        """Signal the child itself (not its group) if it still exists; whether it was sent."""
        return self.returncode is None and self.ref.send_signal(sig)

    async def stop(self, grace: float | None = None) -> int:
        """Stop this child's tree as a group's exit does (SIGINT, SIGTERM, SIGKILL); its code.

        Each step waits ``grace`` (the group's unless given). Descendants that already left the
        tree for another session are stopped when the group exits.
        """
        wait = self.grace if grace is None else grace
        survivors = await stop_processes(lambda: tree_of(self.ref), [self.ref], wait)
        if survivors:
            logger.error("child %s: %d processes survived stop()", self.pid, len(survivors))
        return await self.wait()
