"""``Child``: one process a ``ChildGroup`` started: waited for through a pidfd if it is this
process's own child, or told of its exit by the group's keeper, which is its parent.

Its exit status is never made up. If the keeper dies or stops reporting (SIGKILLed, SIGSTOPped)
or someone else reaps the child, the status comes from the kernel: a zombie's
``/proc/PID/stat``, or, once anyone reaped it, the pidfd this process opened at the spawn
(``PIDFD_INFO_EXIT``, Linux 6.15). Where neither can tell, ``status_lost`` says so and
``returncode`` stays ``None``: never a made-up ``0``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import final

from .. import _backend, _fdstream
from .._util import NoPublicConstructor
from ._proc import pidfd_exit_status, pidfd_open
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._teardown import stop_processes, tree_of

logger = logging.getLogger("tether.process")

REPORT_TIMEOUT = 2.0
"""Seconds the group's keeper has to report a child's exit once the child's pidfd says it
exited; past it the keeper is taken for unresponsive (``Child.on_silent``)."""


@final
class Child(metaclass=NoPublicConstructor):
    """A process started by ``ChildGroup.spawn``: the leader of its own session and group."""

    def __init__(
        self, ref: ProcessRef, argv: Sequence[str], name: str, grace: float, *, kept: bool = False
    ) -> None:
        self.ref = ref
        """The process, by pid and start time (so a reused pid is never mistaken for it)."""
        self.argv = tuple(argv)
        """The command line it was spawned with."""
        self.name = name
        """Its name in logs and reports."""
        self.grace = grace
        """Seconds between the signals that stop it."""
        self.returncode: int | None = None
        """The exit status once known: the code, or ``-signo`` if a signal killed it;
        ``None`` while it runs, and if its status was lost (``status_lost``)."""
        self.stdin: _fdstream.PipeStream | None = None
        """With ``stdin=PIPE``: the child's standard input (``send_all``)."""
        self.stdout: _fdstream.PipeStream | None = None
        """With ``stdout=PIPE``: the child's standard output (``receive_some``)."""
        self.stderr: _fdstream.PipeStream | None = None
        """With ``stderr=PIPE``: the child's standard error (``receive_some``)."""
        self.pipes: dict[str, int] = {}
        """The read ends of its output pipes here, by stream name (to find their holders)."""
        self.status_lost = False
        """Whether it is gone and its exit status could not be had (``returncode`` stays
        ``None``): its keeper died and the kernel could not tell (before Linux 6.15)."""
        self.on_silent: Callable[[Child], None] | None = None
        """Called when the keeper left this child's exit unreported for ``REPORT_TIMEOUT``."""
        self._kept = kept
        """Whether the group's keeper is its parent (and reports its exit)."""
        self._done = _backend.event()
        self._exit_seen: float | None = None
        """When its pidfd said it exited (the loop's time)."""
        self._watching = False
        self._watch_done = _backend.event()
        try:  # a kept child's zombie is held by the keeper until our ack: the pid is its own
            self._pidfd = pidfd_open(ref.pid)
        except ProcessLookupError:  # pragma: no cover - an unreaped child cannot vanish
            self._pidfd = None
        if not kept:
            SPAWNED[ref.pid] = self

    @property
    def pid(self) -> int:
        """The child's pid (also its process group and session id)."""
        return self.ref.pid

    @property
    def done(self) -> bool:
        """Whether it has exited and its status is settled (known, or lost)."""
        return self._done.is_set()

    @property
    def exited(self) -> bool:
        """Whether it is known to have exited (its status may still be on its way)."""
        return self._exit_seen is not None or self.done

    def __repr__(self) -> str:
        if not self.done:
            state = "running"
        else:
            state = "status lost" if self.status_lost else f"exited {self.returncode}"
        return f"<tether.Child {self.name!r} pid={self.pid} {state}>"

    def poll(self) -> int | None:
        """Reap the child if it has exited; its ``returncode`` or ``None``. Not a checkpoint."""
        if self.done or self._kept:
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            # Reaped by someone else (SIGCHLD ignored, or a waitpid(-1) elsewhere): the kernel
            # may still know its status.
            self._settle_from_kernel(gone=True)
            return self.returncode
        if pid == 0:
            return None
        self._reaped(os.waitstatus_to_exitcode(status))
        return self.returncode

    def close_streams(self) -> None:
        """Close whichever of ``stdin``, ``stdout`` and ``stderr`` are open here."""
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()

    def _reaped(self, code: int | None) -> None:
        """Settle the status (``None``: lost); the first settlement stands."""
        if self.done:
            return
        self.returncode = code
        self.status_lost = code is None
        self._done.set()
        SPAWNED.pop(self.pid, None)
        if self._pidfd is not None:
            _backend.notify_closing(self._pidfd)  # a task in wait() sees it and re-checks
            os.close(self._pidfd)
            self._pidfd = None

    def _settle_from_kernel(self, *, gone: bool = False) -> bool:
        """Settle the status from the kernel if it has exited: a zombie's ``/proc`` stat, or,
        once anyone reaped it, its pidfd. With ``gone`` (it was reaped elsewhere), a status
        the kernel cannot give is settled as lost. Whether it is settled now."""
        if self.done:
            return True
        try:
            stat = self.ref.stat()
        except OSError:  # no descriptor to spare: look again later
            return False
        if stat is not None and stat.state != "Z":
            return False  # it runs
        if stat is not None and stat.exit_code is not None:
            self._reaped(os.waitstatus_to_exitcode(stat.exit_code))
            return True
        status = pidfd_exit_status(self._pidfd) if self._pidfd is not None else None
        if status is not None:
            self._reaped(os.waitstatus_to_exitcode(status))
        elif stat is None or gone:
            logger.warning("child %s: its exit status is lost (the kernel cannot tell)", self.pid)
            self._reaped(None)
        return self.done

    async def wait(self) -> int | None:
        """Wait for the child to exit, reap it and return its ``returncode`` (``None`` only if
        its status was lost: ``status_lost``).

        A kept child's exit left unreported by the keeper for ``REPORT_TIMEOUT`` (a keeper
        that was SIGSTOPped) calls ``on_silent`` and takes the status from the kernel.

        Cancel safety: safe; the child is untouched and a later ``wait`` still works.
        """
        while not self.done:
            await self._exited()
            if self.done or self._exit_seen is None:
                continue  # settled meanwhile, or the task watching the pidfd was cancelled
            if self._kept:
                await self._await_report(self._exit_seen)
            elif self.poll() is None:  # pragma: no cover - exited but not a zombie yet
                await _backend.sleep(0.005)
        await _backend.checkpoint()
        return self.returncode

    async def _await_report(self, exited_at: float) -> None:
        with _backend.cancel_scope(deadline=exited_at + REPORT_TIMEOUT):
            await self._done.wait()
        if self.done:
            return
        if self.on_silent is not None:
            self.on_silent(self)
        await self.without_keeper()

    async def without_keeper(self) -> None:
        """Settle the status from the kernel once the child exits: its keeper is gone or
        silent. Bounded by ``REPORT_TIMEOUT`` once it exited (past it, a status the kernel
        will not tell is lost); it may run for as long as it likes before."""
        while not self.done:
            await self._exited()
            if self._exit_seen is None or self._settle_from_kernel():
                continue
            late = _backend.current_time() - self._exit_seen > REPORT_TIMEOUT
            if not (late and self._settle_from_kernel(gone=True)):
                await _backend.sleep(0.005)  # between its exit and its zombie, or its reaping

    async def _exited(self) -> None:
        """Return once it has exited (``_exit_seen``), is settled, or the task that watches
        its pidfd for everyone was cancelled (then look again)."""
        if self._exit_seen is not None or self.done:
            await _backend.checkpoint()
            return
        if self._watching:
            await self._watch_done.wait()
            return
        self._watching = True
        self._watch_done = _backend.event()
        try:
            if self._pidfd is not None:
                await _backend.wait_readable(self._pidfd)
            else:
                delay = 0.001
                while self.ref.state() not in (None, "Z"):
                    await _backend.sleep(delay)
                    delay = min(delay * 2, 0.1)
            self._exit_seen = _backend.current_time()
        except _backend.closed_errors():
            pass  # another task settled the status and closed the pidfd
        finally:
            self._watching = False
            self._watch_done.set()

    def send_signal(self, sig: int) -> bool:
        """Signal the child itself (not its group) if it still exists; whether it was sent."""
        return not self.done and self.ref.send_signal(sig)

    async def stop(self, grace: float | None = None) -> int | None:
        """Stop this child's tree as a group's exit does (SIGINT, SIGTERM, SIGKILL); its code
        (``None`` if its status was lost).

        Each step waits ``grace`` (the group's unless given). Descendants that already left the
        tree for another session are stopped when the group exits.
        """
        wait = self.grace if grace is None else grace
        survivors = await stop_processes(lambda: tree_of(self.ref), [self.ref], wait)
        if survivors:
            logger.error("child %s: %d processes survived stop()", self.pid, len(survivors))
        return await self.wait()
