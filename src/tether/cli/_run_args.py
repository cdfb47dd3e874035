"""``tether run``'s command line: ``Options`` reads it without ``argparse`` (which costs
start-up time); ``parser`` is the same options with their help, loaded for ``--help`` and to
say what is wrong with a bad one."""

from __future__ import annotations

import sys

from .. import _procfs

TYPE_CHECKING = False  # ``typing`` and ``argparse`` cost start-up time
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import ClassVar


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
        "--die-with-parent",
        action="store_true",
        help="stop CMD's whole tree when the process that started tether run dies (watched "
        "with a pidfd: a spawning thread's exit is not its death)",
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
        "--die-with-parent": "die_with_parent",
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
        self.die_with_parent = False
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
                        usage(f"{name} needs a value")
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
                            usage(f"unknown option -{letter}")
                        setattr(self, self.FLAGS[f"-{letter}"], True)
            else:
                usage(f"unknown option {arg}")

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
            usage(str(exc))
        if self.grace < 0 or (self.stop_timeout or 0) < 0:
            usage(f"--{name.replace('_', '-')} must not be negative")


EX_USAGE = 64


def usage(message: str) -> None:
    """A bad command line: usage and one line on stderr, exit 64 (EX_USAGE)."""
    parser().print_usage(sys.stderr)
    print(f"tether run: error: {message}", file=sys.stderr)
    raise SystemExit(EX_USAGE)


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
