"""The ``tether`` command: ``demo``, ``run``, ``agentd``, ``ps``, ``start``, ``send``, ``stop``,
``reset`` and ``transcript show|repair``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial

import trio

from . import _agentd, _run, _transcript
from ._demo import demo


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tether`` console script; returns the exit code."""
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
    run = commands.add_parser(
        "run", help="run a command under tether: signals forwarded and named, nothing left behind"
    )
    run.add_argument("--session", default=None, help="the TETHER_SESSION mark (run-<pid>)")
    run.add_argument("--grace", type=float, default=2.0, help="seconds per escalation step")
    run.add_argument("--log", default=None, help="log here instead of stderr")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    _agentd.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return trio.run(
            partial(demo, sys.stdout, scenario=args.scenario, as_json=args.json, keep=args.keep)
        )
    if args.command == "run":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("tether run needs a command: tether run -- CMD ARGS...")
        return _run.run(cmd, session=args.session, grace=args.grace, log=args.log)
    if args.command == "transcript":
        return _transcript.run(args.action, args.path, sys.stdout)
    if args.command in _agentd.COMMANDS:
        return _agentd.run(args, sys.stdout)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
