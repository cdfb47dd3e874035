"""The ``tether`` command: ``demo``, ``run``, ``agentd``, ``ps``, ``start``, ``send``, ``stop``,
``reset`` and ``transcript show|repair``.

Each command imports what it needs when it runs: ``tether run`` never imports trio, so it
starts as fast as the interpreter does.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # ``collections.abc`` and ``typing`` cost start-up time
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tether`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from ._run import main as run

        code = run(args[1:])
        if argv is None:  # the command itself: skip the interpreter's teardown, as tini has none
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    import argparse
    from functools import partial

    import trio

    from . import _agentd, _transcript
    from ._demo import demo

    parser = argparse.ArgumentParser(prog="tether", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="replay the three incidents on real processes and show what holds"
    )
    demo_parser.add_argument("--scenario", type=int, choices=(1, 2, 3), default=None)
    demo_parser.add_argument("--json", action="store_true", help="machine-readable verdicts")
    demo_parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    transcript = commands.add_parser("transcript", help="read or repair a session transcript")
    transcript.add_argument("action", choices=("show", "repair"))
    transcript.add_argument("path")
    commands.add_parser(
        "run",
        help="run a command like tini: signals forwarded and named, orphans reaped, nothing"
        " left behind (tether run --help)",
        add_help=False,
    )
    _agentd.add_commands(commands)
    parsed = parser.parse_args(args)
    if parsed.command == "demo":
        return trio.run(
            partial(
                demo, sys.stdout, scenario=parsed.scenario, as_json=parsed.json, keep=parsed.keep
            )
        )
    if parsed.command == "transcript":
        return _transcript.run(parsed.action, parsed.path, sys.stdout)
    if parsed.command in _agentd.COMMANDS:
        return _agentd.run(parsed, sys.stdout)
    parser.error(f"unknown command {parsed.command!r}")  # pragma: no cover - argparse refuses


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
