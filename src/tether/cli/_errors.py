"""How ``tether`` fails: one line on stderr and a sysexits code, never a traceback (unless
``--debug``), whatever a person did wrong.

Errors raised inside trio nurseries arrive wrapped in exception groups; ``explain`` looks
through them to the one cause a person can act on.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import NoReturn

EX_TURN_FAILED = 1
"""``send --wait-reply``: the prompt was delivered, and its turn failed."""
EX_USAGE = 64
"""A bad command line."""
EX_DATAERR = 65
"""Bad input data (a prompt, a transcript)."""
EX_NOINPUT = 66
"""An input file that does not exist or cannot be read."""
EX_UNAVAILABLE = 69
"""A service (the daemon, the store, an extra's package) or a session is not there."""
EX_SOFTWARE = 70
"""A bug in tether: it says so, and ``--debug`` shows the traceback."""
EX_PROTOCOL = 76
"""The daemon answered something this client cannot read."""
EX_TEMPFAIL = 75
"""Try again later (the store is in use, the daemon busy, a delivery failed)."""
EX_NOPERM = 77
"""Not allowed (a socket directory other users can reach, a file's permissions)."""
EX_CONFIG = 78
"""The configuration does not hold (a setting the daemon refuses, a host id in use)."""


class CliError(Exception):
    """A failure to report as one line with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line exits ``EX_USAGE`` (64), not 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help with each meaningful default shown once, and descriptions and examples kept as
    written: no default is added to a help that already names one, nor a ``None`` or an
    empty one, nor a flag's (``agentd --help`` said "(default: ...) (default: None)";
    ``send --no-wait`` said "(default: True)", its destination's value, as if it were on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text  # it names its default itself (or uses %(default)s)
            or default is None
            or default == ""  # events --session said "(default: )"
            or action.nargs == 0  # a flag: its help says what giving it does
            or default is argparse.SUPPRESS
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, "*"))
        ):
            return action.help
        return f"{text} (default: %(default)s)"


def positive(kind: type[float | int]) -> argparse._ActionType:
    """An argparse ``type`` that accepts only a number above zero of ``kind``."""

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def not_negative(text: str) -> float:
    """An argparse ``type``: a number of seconds, zero or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s groups, innermost first found."""
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(leaves(inner))
        return found
    return [exc]


def explain(exc: BaseException) -> tuple[int, str] | None:
    """The exit code and line for an error a person caused; ``None`` for a bug."""
    causes = leaves(exc)
    if len(causes) != 1:
        known = [explain(cause) for cause in causes]
        return next((k for k in known if k is not None), None)
    cause = causes[0]
    if isinstance(cause, CliError):
        return cause.code, cause.message
    if isinstance(cause, KeyboardInterrupt):
        return 130, "interrupted"
    from ..agentd import AgentdError
    from ..epochs import HostIdInUse, StoreInUse, StoreUnavailable
    from ..journal import JournalError
    from ..wire import UnsafeSocketPath

    if isinstance(cause, AgentdError):
        return cause.code, cause.reason
    if isinstance(cause, UnsafeSocketPath | PermissionError):
        return EX_NOPERM, str(cause)
    if isinstance(cause, StoreInUse):
        return EX_TEMPFAIL, str(cause)
    if isinstance(cause, HostIdInUse):
        return EX_CONFIG, str(cause)
    if isinstance(cause, StoreUnavailable):
        return EX_UNAVAILABLE, f"cannot reach the store: {cause}"
    if isinstance(cause, JournalError):
        return EX_DATAERR if cause.errno in (None, 0) else EX_NOINPUT, str(cause)
    if isinstance(cause, FileNotFoundError):
        return EX_NOINPUT, str(cause)
    if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
        return EX_TEMPFAIL, f"the socket is in use: {cause.strerror}"
    if isinstance(cause, ValueError):
        return EX_CONFIG, str(cause)
    return None


def report(exc: BaseException, prog: str, debug: bool) -> int:
    """Print ``exc`` as one line (or its traceback with ``debug``); the exit code."""
    known = explain(exc)
    if debug:
        import traceback

        traceback.print_exception(exc)
        return known[0] if known is not None else EX_SOFTWARE
    if known is None:
        cause = leaves(exc)[0]
        print(
            f"{prog}: internal error: {type(cause).__name__}: {cause}"
            " (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EX_SOFTWARE
    code, message = known
    print(f"{prog}: {message}", file=sys.stderr)
    return code
