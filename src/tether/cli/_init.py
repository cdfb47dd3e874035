"""``Init``: ``tether run``'s life once CMD runs, the way tini and dumb-init live theirs.

Every catchable signal is blocked and read with ``sigtimedwait``, so its sender is known and
none is lost (not even as PID 1, where the kernel drops signals that have no handler):

- SIGCHLD: reap every child, whatever it is (``tether run`` owns every child it has: CMD and
  the orphans it adopts as a subreaper or as PID 1);
- SIGTSTP, SIGTTIN, SIGTTOU: forwarded to CMD's process group (rewritten first if
  ``--rewrite`` says so), then ``tether run`` stops itself, so the shell sees the job
  stopped (dumb-init's job control); SIGCONT resumes both; when CMD stops on its own (^Z on
  its terminal), ``tether run`` stops too;
- anything else: forwarded to CMD (to its process group with ``--group``), rewritten first if
  ``--rewrite`` says so. CMD takes the time it needs to obey a SIGTERM (its grace is the
  sender's to choose, as ``docker stop`` and Kubernetes do), unless ``stop_timeout`` is
  given: then CMD's tree is killed that long after the first forwarded SIGTERM.

When CMD exits, whatever is left below ``tether run`` gets SIGTERM, then SIGKILL after
``grace``, and is reaped.
"""

from __future__ import annotations

import os
import time

from .. import _procfs
from ._run_watch import Watcher
from ._say import say

TYPE_CHECKING = False  # ``collections.abc`` and ``typing`` cost start-up time
if TYPE_CHECKING:
    import signal
    from collections.abc import Mapping
else:
    import _signal as signal  # without its enums: see tether._procfs

JOB_CONTROL = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
CATCHABLE = _procfs.CATCHABLE


class Init:
    """CMD's parent until CMD exits.

    Args:
        cmd: CMD's pid (and process group).
        grace: seconds between SIGTERM and SIGKILL for what CMD leaves.
        stop_timeout: seconds from a forwarded SIGTERM to killing CMD's tree; ``None``
            waits for CMD as long as it takes.
        tty: the controlling terminal, if CMD was given its foreground.
        watcher: told of this process's children, in case it is killed.
        group: forward signals to CMD's process group, not CMD alone.
        rewrite: signal number to the one to forward instead (0: drop it).
        warn_reaped: log every orphan reaped.
    """

    def __init__(
        self,
        cmd: int,
        grace: float,
        tty: int | None,
        watcher: Watcher | None,
        *,
        group: bool = False,
        rewrite: Mapping[int, int] | None = None,
        warn_reaped: bool = False,
        stop_timeout: float | None = None,
    ) -> None:
        self.cmd = cmd
        self.grace = grace
        self.stop_timeout = stop_timeout
        self.tty = tty
        self.watcher = watcher
        self.group = group
        self.rewrite = dict(rewrite or {})
        self.warn_reaped = warn_reaped
        self.status: int | None = None
        """CMD's exit code (``-signo`` if a signal ended it) once it exited."""
        self._sigterm_deadline: float | None = None
        self._report_every = 0.05
        self._children: set[_procfs.Identity] = set()

    def run(self) -> int:
        """Supervise until CMD exits and what it left is stopped; CMD's exit code."""
        self._report()
        while self.status is None:
            timeout = self._report_every
            if self._sigterm_deadline is not None:
                timeout = max(0.0, min(timeout, self._sigterm_deadline - time.monotonic()))
            info = signal.sigtimedwait(CATCHABLE, timeout)
            if info is None:
                self._tick()
            elif info.si_signo == signal.SIGCHLD:
                self._reap()
            else:
                self._received(info)
            self._report()
        self._give_back_tty()
        self._stop_leftovers()
        return self.status

    def _received(self, info: signal.struct_siginfo) -> None:
        say.info(describe(info))
        sig = self.rewrite.get(info.si_signo, info.si_signo)
        if info.si_signo in JOB_CONTROL:  # rewritten or not, it suspends (as in dumb-init)
            self._suspend(info.si_signo, sig)
        elif sig == 0:
            say.info(f"ignored {_name(info.si_signo)} (rewritten to 0)")
        elif sig == signal.SIGCONT:
            self._resume()
        else:
            self._forward(sig)

    def _forward(self, sig: int) -> None:
        try:
            if self.group:
                os.killpg(self.cmd, sig)
            else:
                os.kill(self.cmd, sig)
        except ProcessLookupError:
            return
        where = f"process group {self.cmd}" if self.group else f"pid {self.cmd}"
        say.info(f"forwarded {_name(sig)} to {where}")
        first = self._sigterm_deadline is None
        if sig == signal.SIGTERM and self.stop_timeout is not None and first:
            self._sigterm_deadline = time.monotonic() + self.stop_timeout

    def _suspend(self, sig: int, forward: int) -> None:
        """Job control: CMD's group gets ``forward`` (``sig`` rewritten; none if 0), then this
        process stops until SIGCONT."""
        if forward:
            try:
                os.killpg(self.cmd, forward)
            except ProcessLookupError:
                pass
            say.info(f"forwarded {_name(forward)} to process group {self.cmd}")
        say.info(f"suspending on {_name(sig)}")
        self._stop_self(sig)

    def _stop_self(self, sig: int) -> None:
        """Stop until SIGCONT (read next, as it stays pending). On a terminal, with the same
        signal CMD got, so the shell reports the job as ^Z would (``$?`` 148); otherwise with
        SIGSTOP, as dumb-init does, which no orphaned process group can discard."""
        self._give_back_tty()
        if self.tty is None or sig == signal.SIGSTOP:
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        previous = signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])  # delivered now: we stop here
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
        signal.signal(sig, previous)

    def _resume(self) -> None:
        if self.tty is not None:
            _foreground(self.tty, self.cmd)
        try:
            os.killpg(self.cmd, signal.SIGCONT)
        except ProcessLookupError:
            return
        say.info(f"forwarded SIGCONT to process group {self.cmd}")

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFSTOPPED(status):
                if pid == self.cmd and self.tty is not None:
                    say.info(f"pid {pid} stopped; suspending with it")
                    self._stop_self(os.WSTOPSIG(status))
                continue
            if pid == self.cmd:
                self.status = os.waitstatus_to_exitcode(status)
                say.info(f"pid {pid} exited {self.status}")
            elif self.warn_reaped:
                say.warning(f"Reaped zombie process with pid={pid}")  # tini's words

    def _tick(self) -> None:
        deadline = self._sigterm_deadline
        if deadline is not None and time.monotonic() >= deadline and self.status is None:
            self._sigterm_deadline = None
            say.warning(
                f"pid {self.cmd} still runs {self.stop_timeout}s after SIGTERM "
                "(--stop-timeout): stopping its tree"
            )
            me = os.getpid()
            _procfs.escalate(lambda: _below(me), ((signal.SIGKILL, 1.0),), self._reap)

    def _report(self) -> None:
        """Tell the watcher who this process's children are (orphans come and go unseen, so
        look often while they do and back off while nothing changes)."""
        if self.watcher is None:
            return
        children = {
            ident for pid in _procfs.children(os.getpid()) if (ident := _procfs.identity(pid))
        }
        if children != self._children:
            self._children = children
            self.watcher.report(children)
            self._report_every = 0.05
        else:
            self._report_every = min(self._report_every * 2, 1.0)

    def _give_back_tty(self) -> None:
        if self.tty is not None:
            _foreground(self.tty, os.getpgrp())

    def _stop_leftovers(self) -> None:
        me = os.getpid()
        left = _below(me) if _procfs.children(me) else set()  # no child: no descendant
        if left:
            say.info(f"stopping {len(left)} processes pid {self.cmd} left")
            steps = ((signal.SIGTERM, self.grace), (signal.SIGKILL, 1.0))
            _procfs.escalate(lambda: _below(me), steps, self._reap_quietly)
        self._reap_quietly()

    def _reap_quietly(self) -> None:
        for pid, _ in _procfs.reap_all():
            if self.warn_reaped:
                say.warning(f"Reaped zombie process with pid={pid}")  # tini's words


def _below(me: int) -> set[_procfs.Identity]:
    pids = _procfs.descendants([me], _procfs.table())
    return _procfs.identities(pids)


def _foreground(tty: int, pgrp: int) -> None:
    try:
        os.tcsetpgrp(tty, pgrp)  # allowed in the background: SIGTTOU is blocked here
    except OSError as exc:
        say.debug(f"cannot give the terminal to process group {pgrp}: {exc}")


def _name(sig: int) -> str:
    return _procfs.signal_name(sig)


def describe(info: signal.struct_siginfo) -> str:
    """``received SIGTERM from pid=N uid=N cmd=...`` (the line ``tether.signals`` logs)."""
    cmd = "[kernel]" if info.si_pid == 0 else _procfs.cmdline(info.si_pid)
    return f"received {_name(info.si_signo)} from pid={info.si_pid} uid={info.si_uid} cmd={cmd}"
