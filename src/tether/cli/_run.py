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
from ._run_watch import Watcher
from ._say import INFO, say

TYPE_CHECKING = False  # ``typing`` and ``argparse`` cost start-up time
if TYPE_CHECKING:
    import argparse
    import signal
    from collections.abc import Mapping, Sequence
    from typing import ClassVar
else:
    import _signal as signal  # without its enums: see tether._procfs

EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
PYTHON_IGNORES = frozenset({signal.SIGPIPE, signal.SIGXFSZ})
"""Signals the interpreter ignores itself at start-up: not inherited, so CMD gets them back."""


def parser() -> argparse.ArgumentParser:
    """The options, for ``--help`` and errors (the fast path reads them with ``Options``)."""
    import argparse

    run = argparse.ArgumentParser(
        prog="tether run",
        description="Run CMD as a child subreaper would (like tini or dumb-init): every signal "
        "forwarded and its sender named, every orphan reaped, nothing left behind when CMD "
        "exits or tether run is killed.",
        epilog="example: tether run --grace 5 -- python worker.py --port 8080",
    )
    run.add_argument("--session", default=None, help="the TETHER_SESSION mark (run-<pid>)")
    run.add_argument(
        "--grace", type=float, default=2.0,
        help="once CMD exited, seconds from SIGTERM to SIGKILL for what it left (default 2)",
    )  # fmt: skip
    run.add_argument(
        "--stop-timeout", type=float, default=None, metavar="S",
        help="kill CMD's tree S seconds after a forwarded SIGTERM (default: CMD takes the time "
        "it needs, as under tini and dumb-init)",
    )  # fmt: skip
    run.add_argument("--log", default=None, help="log (at INFO) to this file, not stderr")
    run.add_argument("-v", "--verbose", action="store_true", help="log INFO lines to stderr")
    run.add_argument(
        "-g", "--group", action="store_true", help="forward signals to CMD's process group"
    )
    run.add_argument(
        "-r",
        "--rewrite",
        action="append",
        default=[],
        metavar="S:D",
        help="forward signal number D when S arrives (0 drops S); repeatable",
    )
    run.add_argument(
        "-e",
        "--remap-exit",
        action="append",
        type=int,
        default=[],
        metavar="CODE",
        help="exit 0 when CMD exits CODE; repeatable",
    )
    run.add_argument(
        "-p", "--pdeathsig", default=None, metavar="SIGNAL", help="get SIGNAL when my parent dies"
    )
    run.add_argument(
        "-w", "--warn-reaped", action="store_true", help="log every orphan that is reaped"
    )
    run.add_argument(
        "-s", "--subreaper", action="store_true", help="accepted for tini: always a subreaper"
    )
    run.add_argument(
        "-c",
        "--single-child",
        action="store_true",
        help="accepted for dumb-init: signals go to CMD alone unless -g",
    )
    run.add_argument(
        "--reset-signals",
        action="store_true",
        help="start CMD with default signal handling and an empty mask, not tether run's "
        "(the C library's reserved signals 32 and 33 keep what they inherited)",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return run


class Options:
    """What the command line says, read without ``argparse`` (see ``parser`` for the same
    options with their help)."""

    FLAGS: ClassVar[dict[str, str]] = {
        "-v": "verbose", "--verbose": "verbose", "-g": "group", "--group": "group",
        "-w": "warn_reaped", "--warn-reaped": "warn_reaped", "-s": "subreaper",
        "--subreaper": "subreaper", "--reset-signals": "reset_signals",
        "-c": "single_child", "--single-child": "single_child",
    }  # fmt: skip
    VALUES: ClassVar[dict[str, str]] = {
        "--session": "session", "--grace": "grace", "--log": "log", "-r": "rewrite",
        "--rewrite": "rewrite", "-e": "remap_exit", "--remap-exit": "remap_exit",
        "-p": "pdeathsig", "--pdeathsig": "pdeathsig", "--stop-timeout": "stop_timeout",
    }  # fmt: skip

    def __init__(self, argv: Sequence[str]) -> None:
        self.session: str | None = None
        self.grace = 2.0
        self.stop_timeout: float | None = None
        self.log: str | None = None
        self.verbose = self.group = self.warn_reaped = False
        self.subreaper = self.reset_signals = self.single_child = False
        self.rewrite: dict[int, int] = {}
        self.remap_exit: set[int] = set()
        self.deathsig: int | None = None
        self.cmd: list[str] = []
        args = list(argv)
        while args:
            arg = args.pop(0)
            if arg == "--":
                self.cmd = args
                return
            if arg in ("-h", "--help") or not arg.startswith("-") or arg == "-":
                if arg in ("-h", "--help"):
                    parser().parse_args(["--help"])
                self.cmd = [arg, *args]
                return
            name, eq, value = arg.partition("=")
            if name in self.VALUES:
                if not eq:
                    if not args:
                        _usage(f"{name} needs a value")
                    value = args.pop(0)
                self._set(self.VALUES[name], value)
            elif name in self.FLAGS and not eq:
                setattr(self, self.FLAGS[name], True)
            elif not arg.startswith("--") and len(arg) > 2:
                if f"-{arg[1]}" in self.VALUES:  # -e3, -pSIGUSR1
                    self._set(self.VALUES[f"-{arg[1]}"], arg[2:])
                else:  # -vgw
                    for letter in arg[1:]:
                        if f"-{letter}" not in self.FLAGS:
                            _usage(f"unknown option -{letter}")
                        setattr(self, self.FLAGS[f"-{letter}"], True)
            else:
                _usage(f"unknown option {arg}")

    def read_environ(self, environ: Mapping[str, str]) -> None:
        """tini's variables, so ``tether run`` drops in where they are set:
        ``TINI_KILL_PROCESS_GROUP`` is ``-g``, ``TINI_VERBOSITY`` 2 or more is ``-v``
        (``TINI_SUBREAPER`` needs nothing: ``tether run`` always is one)."""
        if environ.get("TINI_KILL_PROCESS_GROUP"):
            self.group = True
        verbosity = environ.get("TINI_VERBOSITY", "")
        if verbosity.isdigit() and int(verbosity) >= 2:
            self.verbose = True

    def _set(self, name: str, value: str) -> None:
        try:
            if name == "grace":
                self.grace = float(value)
            elif name == "stop_timeout":
                self.stop_timeout = float(value)
            elif name == "rewrite":
                source, target = _rewrite(value)
                self.rewrite[source] = target
            elif name == "remap_exit":
                self.remap_exit.add(_exit_code(value))
            elif name == "pdeathsig":
                self.deathsig = _signal(value)
            else:
                setattr(self, name, value)
        except ValueError as exc:
            _usage(str(exc))
        if self.grace < 0 or (self.stop_timeout or 0) < 0:
            _usage(f"--{name.replace('_', '-')} must not be negative")


EX_USAGE = 64


def _usage(message: str) -> None:
    """A bad command line: usage and one line on stderr, exit 64 (EX_USAGE)."""
    parser().print_usage(sys.stderr)
    print(f"tether run: error: {message}", file=sys.stderr)
    raise SystemExit(EX_USAGE)


def main(argv: Sequence[str], mask: set[int] | None = None) -> int:
    """``tether run``; the exit status. ``mask`` is the signal mask it started with, if the
    caller already blocked every catchable signal (as the ``tether`` command does first)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, CATCHABLE)
    mask = blocked if mask is None else mask
    opts = Options(argv)
    opts.read_environ(os.environ)
    cmd = opts.cmd
    if not cmd:
        _usage("a command is needed: tether run -- CMD ARGS...")
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
    watcher = None if os.getpid() == 1 else Watcher.start(opts.grace, mark)
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


def _rewrite(item: str) -> tuple[int, int]:
    source, sep, target = item.partition(":")
    if not sep:
        raise ValueError(f"--rewrite {item!r}: use S:D, two signal numbers")
    return _signal(source), (0 if target.strip() == "0" else _signal(target))


def _exit_code(text: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"-e {text!r}: an exit code is a number from 0 to 255")
    return int(text)


def _signal(text: str) -> int:
    return _procfs.signal_number(text)
