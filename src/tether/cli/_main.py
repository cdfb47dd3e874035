"""Every ``tether`` command but ``run``: the parser, and one line and a sysexits code for each
failure (``_errors``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial

from .. import __version__
from ._errors import EX_USAGE, Formatter, Parser, report

DESCRIPTION = """\
tether keeps agent harnesses and their children honest about being alive: the session
daemon (agentd) and the commands that talk to it, an init for any command (run), and a
replay of the incidents it exists for (demo). Every error is one line and a sysexits code:
64 usage, 65 bad data, 66 no input, 69 unavailable, 75 try again, 77 permission, 78 config.
"""
EXAMPLES = """\
examples:
  tether demo
  tether run -- python worker.py
  tether agentd -- python engine.py &
  tether paths
  tether start s1; tether send s1 "fix the tests"; tether ps; tether events --follow
"""


def parser() -> Parser:
    """The whole command line (``run`` has its own, for speed: ``tether run --help``)."""
    from . import _agentd_args, _ops

    top = Parser(prog="tether", description=DESCRIPTION, epilog=EXAMPLES, formatter_class=Formatter)
    top.add_argument("--version", action="version", version=f"tether {__version__}")
    top.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not one line"
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="replay the three incidents on real processes and show what holds",
        description="Replay the three incidents on real processes; exit 0 if every guarantee"
        " held, 1 if one did not.", formatter_class=Formatter,
    )  # fmt: skip
    demo.add_argument("--scenario", type=int, choices=range(1, 6), default=None, help="only one")
    demo.add_argument("--json", action="store_true", help="machine-readable verdicts")
    demo.add_argument("--keep", action="store_true", help="keep the run's directory")
    transcript = commands.add_parser(
        "transcript", help="read or repair a session transcript",
        description="Show a transcript's entries, follow a live one, or repair it (damaged"
        " lines quarantined).",
        epilog="examples (`tether paths` says where a session's transcript is):\n"
        "  tether transcript show ~/.local/state/tether/sessions/s1/s1.jsonl\n"
        "  tether transcript tail -f ~/.local/state/tether/sessions/s1/s1.jsonl",
        formatter_class=Formatter,
    )  # fmt: skip
    transcript.add_argument("action", choices=("show", "tail", "repair"), help="what to do")
    transcript.add_argument("path", help="the transcript (.jsonl)")
    transcript.add_argument(
        "--json", action="store_true",
        help="show: the entries as one JSON array; tail: one JSON object per line",
    )  # fmt: skip
    transcript.add_argument(
        "--follow", "-f", action="store_true", help="tail: keep showing entries as they come"
    )
    transcript.add_argument(
        "--lines", "-n", type=int, default=10, help="tail: how many past entries first"
    )
    commands.add_parser(
        "run",
        help="run a command like tini: signals forwarded and named, orphans reaped, nothing"
        " left behind (tether run --help)",
        add_help=False,
    )
    _agentd_args.add_command(commands)
    _ops.add_commands(commands)
    paths = commands.add_parser(
        "paths", help="show where agentd keeps its socket, store, event log and transcripts",
        description="Where `tether agentd` with the same options and environment keeps its"
        " socket, state directory, store, event log and each session's transcript.",
        formatter_class=Formatter,
    )  # fmt: skip
    paths.add_argument("--socket", default=None, help="as agentd's --socket")
    paths.add_argument("--state-dir", default=None, help="as agentd's --state-dir")
    paths.add_argument("--store", default=None, help="as agentd's --store")
    paths.add_argument("--json", action="store_true", help="one JSON object")
    return top


def main(args: Sequence[str]) -> int:
    """``tether ARGS``; the exit status."""
    debug = "--debug" in args
    try:
        return _run(list(args))
    except SystemExit as exit:  # argparse: --help, --version, or a usage error (64)
        return exit.code if isinstance(exit.code, int) else EX_USAGE
    except BaseException as exc:  # noqa: BLE001 - every failure becomes one line and a code
        command = next((a for a in args if not a.startswith("-")), "")
        return report(exc, f"tether {command}".rstrip(), debug)


def _run(args: list[str]) -> int:
    """Parse ``args`` and run the command, importing only what it needs."""
    parsed = parser().parse_args(args)
    if parsed.command == "demo":
        import trio

        from ._demo import demo

        return trio.run(
            partial(
                demo, sys.stdout, scenario=parsed.scenario, as_json=parsed.json, keep=parsed.keep
            )
        )
    if parsed.command == "transcript":
        from . import _transcript

        return _transcript.run(parsed, sys.stdout)
    if parsed.command == "paths":
        from ._paths import resolve, show

        found = resolve(parsed.socket, parsed.state_dir, parsed.store)
        return show(found, sys.stdout, as_json=parsed.json)
    if parsed.command == "agentd":
        from . import _agentd

        return _agentd.run(parsed)
    from . import _ops

    return _ops.run(parsed, sys.stdout)
