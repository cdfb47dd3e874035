"""The ``tether`` command: ``demo``, ``agentd``, ``ps``, ``start``, ``send``, ``stop``, ``reset``
and ``transcript show|repair``; ``run`` arrives with issue 9."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trio

from . import _agentd, _transcript
from ._demo import demo


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tether`` console script; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tether", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="walk through what tether guarantees, on real objects")
    transcript = commands.add_parser("transcript", help="read or repair a session transcript")
    transcript.add_argument("action", choices=("show", "repair"))
    transcript.add_argument("path")
    _agentd.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return trio.run(demo, sys.stdout)
    if args.command == "transcript":
        return _transcript.run(args.action, args.path, sys.stdout)
    if args.command in ("agentd", "ps", "start", "send", "stop", "reset"):
        return _agentd.run(args, sys.stdout)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
