"""``ProcessRef``: a process named by ``(pid, create_time)``, so a reused pid is never signalled."""

from __future__ import annotations

import math
import os

import attrs
import psutil

from ._proc import Stat, boot_id, exists, pidfd_open, pidfd_send_signal, read_stat


@attrs.frozen
class ProcessRef:
    """A process by identity: its pid and its creation time (as psutil reports it).

    Every query and signal first checks that the process holding ``pid`` now is the one this ref
    was made for; a process that exited and whose pid was reused is "gone", never signalled.
    """

    pid: int
    """The process id."""
    create_time: float
    """Its start time as psutil reports it; with ``pid``, names one process for good."""
    _start: int | None = attrs.field(default=None, eq=False, repr=False)
    """Start time in clock ticks from ``/proc/PID/stat``: the same identity, cheaper to check."""

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        """The ref of the process that has ``pid`` now.

        Raises:
            ProcessLookupError: no such process.
        """
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess as exc:
            raise ProcessLookupError(pid) from exc
        stat = read_stat(pid)
        return cls(pid, create_time, stat.start if stat is not None else None)

    @classmethod
    def find(cls, pid: int, create_time: float, boot: str | None = None) -> ProcessRef | None:
        """The process recorded as ``(pid, create_time)`` (under kernel boot id ``boot``, if
        given), if that very process still exists, zombie or not; ``None`` if it is gone, its
        pid now names another process, or the machine booted since.

        The one way tether finds a recorded process again (a daemon's harness after its
        restart, a job's controller), so a reused pid is never taken for the old process.
        """
        if boot is not None and boot != boot_id():
            return None
        try:
            ref = cls.of(pid)
        except ProcessLookupError:
            return None
        return ref if math.isclose(ref.create_time, create_time, abs_tol=1e-6) else None

    @classmethod
    def from_psutil(cls, process: psutil.Process) -> ProcessRef:
        """The ref of a psutil process (which has already read its creation time)."""
        stat = read_stat(process.pid)
        return cls(process.pid, process.create_time(), stat.start if stat is not None else None)

    def matches(self, stat: Stat) -> bool:
        """Whether ``stat``, read for this pid, is this very process's (by start time; a ref
        made without one is checked against the process table instead)."""
        if self._start is None:
            return self.state() is not None
        return stat.start == self._start

    def stat(self) -> Stat | None:
        """``/proc/PID/stat`` if this process still exists (``None`` off Linux, or gone).

        Raises:
            OSError: ``/proc`` cannot be read now (no descriptor to spare): it may exist.
        """
        if self._start is None:
            return None
        stat = read_stat(self.pid, strict=True)
        return stat if stat is not None and stat.start == self._start else None

    def state(self) -> str | None:
        """The kernel's one-letter state (``Z``: zombie); ``None`` once this process is gone;
        ``?`` while ``/proc`` cannot be read (no descriptor to spare) and the pid exists: a
        process is never taken for gone because this one ran out of descriptors."""
        if self._start is not None:
            try:
                stat = read_stat(self.pid, strict=True)
            except OSError:
                return "?" if exists(self.pid) else None
            if stat is None or stat.start != self._start:
                return None
            return stat.state
        process = self._psutil()
        if process is None:
            return None
        try:
            return "Z" if process.status() == psutil.STATUS_ZOMBIE else "R"
        except psutil.NoSuchProcess:
            return None

    def is_alive(self) -> bool:
        """Whether this process exists and is not a zombie."""
        return self.state() not in (None, "Z")

    def ppid(self) -> int | None:
        """The current parent pid, or ``None`` once this process is gone."""
        stat = read_stat(self.pid)
        if stat is not None and (self._start is None or stat.start == self._start):
            return stat.ppid
        process = self._psutil()
        return process.ppid() if process is not None else None

    def cmdline(self) -> list[str] | None:
        """The command line, or ``None`` if gone or unreadable."""
        process = self._psutil()
        try:
            return process.cmdline() if process is not None else None
        except psutil.Error:
            return None

    def send_signal(self, sig: int) -> bool:
        """Send ``sig`` if this process still exists; whether it was sent.

        With pidfds (Linux 5.3+) the pidfd is opened first and the identity checked after, so
        the signal cannot reach a process that took the pid in between.
        """
        try:
            pidfd = pidfd_open(self.pid)
        except ProcessLookupError:
            return False
        try:
            if self.state() is None:
                return False
            if pidfd is not None:
                pidfd_send_signal(pidfd, sig)
            else:
                process = self._psutil()
                if process is None:
                    return False
                process.send_signal(sig)  # psutil re-checks the identity first
        except (ProcessLookupError, psutil.NoSuchProcess):
            return False
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return True

    def describe(self) -> str:
        """``pid=N cmd=...`` for logs."""
        cmd = self.cmdline()
        return f"pid={self.pid} cmd={' '.join(cmd) if cmd else '?'}"

    def _psutil(self) -> psutil.Process | None:
        """psutil's view of this very process (``None`` if gone, or unreadable now)."""
        try:
            process = psutil.Process(self.pid)
            if process.create_time() != self.create_time:
                return None
        except (psutil.NoSuchProcess, OSError):
            return None
        return process
