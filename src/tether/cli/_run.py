"""``tether run [OPTIONS] -- CMD ARGS...``: run CMD the way tini and dumb-init do, naming every
signal's sender and leaving nothing behind, even if ``tether run`` itself is killed.

``tether run`` is CMD's parent and a child subreaper (or PID 1): it forwards every catchable
signal to CMD, handles job control, reaps every orphan, and when CMD exits stops what is left
(SIGTERM, then SIGKILL after ``--grace``) and exits with CMD's status (128 + n for a signal;
126 if CMD cannot be executed, 127 if it is not found). CMD runs in its own process group with
``tether run``'s working directory, signal mask and ignored signals (``--reset-signals`` starts
it clean), and the foreground of ``tether run``'s terminal if it had it; ``tether run`` itself
moves to ``/``. A detached watcher stops CMD's tree if ``tether run`` is killed
(``_run_watch``). Nothing but a few standard modules is imported on the way to CMD (not even
``argparse`` or ``logging``: ``--help`` and a bad option load ``argparse`` to say so), so it
starts in about the interpreter's own start-up time.
"""

from __future__ import annotations

import os
import sys

from .. import _procfs
from ._init import CATCHABLE, Init
from ._run_args import Options, usage
from ._run_watch import Watcher
from ._say import INFO, say

TYPE_CHECKING = False  # ``typing`` costs start-up time
if TYPE_CHECKING:
    import signal
    from collections.abc import Sequence
else:
    import _signal as signal  # without its enums: see tether._procfs

EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
PYTHON_IGNORES = frozenset({signal.SIGPIPE, signal.SIGXFSZ})
"""Signals the interpreter ignores itself at start-up: not inherited, so CMD gets them back."""


def main(argv: Sequence[str], mask: set[int] | None = None) -> int:
    """``tether run``; the exit status. ``mask`` is the signal mask it started with, if the
    caller already blocked every catchable signal (as the ``tether`` command does first)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CATCHABLE)
    mask = blocked if mask is None else mask
    parent = os.getppid()
    opts = Options(argv)
    opts.read_environ(os.environ)
    cmd = opts.cmd
    if not cmd:
        usage("a command is needed: tether run -- CMD ARGS...")
    if opts.log is not None:
        say.to_file(opts.log)
    elif opts.verbose:
        say.level = INFO
    ignored = set() if opts.reset_signals else _ignored() - PYTHON_IGNORES
    if opts.reset_signals:
        mask = set()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # inherited SIG_IGN would auto-reap CMD
    if opts.deathsig is not None:
        _procfs.prctl(_procfs.PR_SET_PDEATHSIG, opts.deathsig)
    session = opts.session or f"run-{os.getpid()}"
    mark = ("TETHER_GROUP", f"run-{os.getpid()}-{os.urandom(4).hex()}")
    # An inherited subreaper flag would make the watcher this process's child again.
    _procfs.prctl(_procfs.PR_SET_CHILD_SUBREAPER, 0)
    parent_fd = _pidfd_of_parent(parent) if opts.die_with_parent else None
    watcher = None if os.getpid() == 1 else Watcher.start(opts.grace, mark, parent_fd)
    if parent_fd is not None:
        os.close(parent_fd)
    if watcher is None and opts.die_with_parent:
        print("tether run: --die-with-parent needs a watcher (no pidfd here, or pid 1); "
              "CMD not started", file=sys.stderr)  # fmt: skip
        return 1
    if watcher is None and os.getpid() != 1:
        say.warning("no watcher: if tether run is killed, CMD's tree is left to its fate")
    _procfs.prctl(_procfs.PR_SET_CHILD_SUBREAPER, 1)
    env = {**os.environ, "TETHER_SESSION": session, "TETHER_EPOCH": "1", mark[0]: mark[1]}
    tty = _foreground_tty()
    here = _let_go_of_cwd()
    try:
        pid = _spawn(cmd, env, tty, mask, ignored, here)
    except OSError as exc:
        code = EXIT_NOT_FOUND if exc.errno == 2 else EXIT_CANNOT_EXECUTE
        print(f"tether run: cannot execute {cmd[0]!r}: {exc.strerror}", file=sys.stderr)
        if watcher is not None:
            watcher.bye()
        return code
    finally:
        if here is not None:
            os.close(here)
    os.chdir("/")
    say.info(f"started {' '.join(cmd)} as pid {pid} (session {session})")
    init = Init(
        pid, opts.grace, tty, watcher, group=opts.group, rewrite=opts.rewrite,
        warn_reaped=opts.warn_reaped, stop_timeout=opts.stop_timeout,
    )  # fmt: skip
    code = init.run()
    if watcher is not None:
        watcher.bye()
    status = code if code >= 0 else 128 - code
    if status in opts.remap_exit:
        status = 0
    say.info(f"exiting {status}")
    return status


def _pidfd_of_parent(parent: int) -> int:
    """A pidfd of ``parent``, the process that started ``tether run`` (read first thing), for
    the watcher to stop CMD's tree when it dies: a pidfd of a process becomes readable when its
    last thread exits, so a spawning thread's exit (which fires ``PR_SET_PDEATHSIG``) is not
    taken for its death. Exits 1 without running CMD if it is gone already."""
    if parent == 0:
        print("tether run: --die-with-parent: the parent is outside this pid namespace; "
              "CMD not started", file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    try:
        fd = os.pidfd_open(parent)  # AttributeError off Linux: below
    except ProcessLookupError:
        fd = -1
    except (OSError, AttributeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "no pidfd on this system"
        print(f"tether run: --die-with-parent: {why}; CMD not started", file=sys.stderr)
        raise SystemExit(1) from None
    if fd < 0 or os.getppid() != parent:  # it died before the pidfd was taken
        print(f"tether run: the parent (pid {parent}) is gone; CMD not started", file=sys.stderr)
        raise SystemExit(1)
    return fd


def _let_go_of_cwd() -> int | None:
    """Move this process to ``/`` before CMD starts (CMD may look at its parent's directory
    at once, as dumb-init's suite does) and return a descriptor of the caller's directory for
    CMD to go back to; ``None`` (and no move) if it cannot be opened (deleted, say)."""
    try:
        here = os.open(".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    os.chdir("/")
    return here


def _spawn(
    cmd: list[str],
    env: dict[str, str],
    tty: int | None,
    mask: set[int],
    ignored: set[int],
    cwd: int | None,
) -> int:
    """Fork and exec CMD in its own process group (the terminal's foreground, if ``tty``), with
    ``mask`` blocked, ``ignored`` ignored and the directory ``cwd`` (a descriptor, if any); its
    pid.

    Raises:
        OSError: it could not be executed (from the child, through a close-on-exec pipe).
    """
    # Not ``posix_spawn``, though faster: glibc's leaves CMD ignoring its reserved signals 32
    # and 33 (it ignores them around the exec), which tini's signal test sees.
    errors_r, errors_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, until exec
        try:
            os.close(errors_r)
            if cwd is not None:
                os.fchdir(cwd)
            os.setpgid(0, 0)
            if tty is not None:
                try:
                    os.tcsetpgrp(tty, os.getpid())
                except OSError:
                    pass  # the parent's call gives it the terminal
                os.close(tty)
            for sig in CATCHABLE:
                try:
                    signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
                except (OSError, ValueError):
                    continue
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.execvpe(cmd[0], cmd, env)
        except OSError as exc:
            os.write(errors_w, str(exc.errno or 5).encode())
        finally:
            os._exit(EXIT_CANNOT_EXECUTE)
    os.close(errors_w)
    if tty is not None:
        try:
            os.tcsetpgrp(tty, pid)  # in both, as shells do: whichever runs first wins
        except OSError:
            pass
    with os.fdopen(errors_r, "rb") as errors:
        failed = errors.read()
    if failed:
        os.waitpid(pid, 0)
        code = int(failed)
        raise OSError(code, os.strerror(code))
    return pid


def _foreground_tty() -> int | None:
    """The controlling terminal, if this process is in its foreground (CMD then gets it)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _ignored() -> set[int]:
    """The signals this process ignores now (``SigIgn`` of ``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    bits = int(line.split()[1], 16)
                    return {n for n in range(1, 65) if bits & (1 << (n - 1))}
    except OSError:
        pass
    return set()
