"""The commands that talk to a running daemon over its socket: ``ps``, ``start``, ``send``,
``stop``, ``reset``, and the operator's ``events``, ``logs`` and ``inspect``."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any, TextIO

from ..agentd._state import SessionState
from ..wire._control import ControlOp, default_socket
from ._errors import (
    EX_PROTOCOL,
    EX_TEMPFAIL,
    EX_TURN_FAILED,
    EX_UNAVAILABLE,
    CliError,
    Formatter,
    positive,
)
from ._ps import table
from ._request import request

OPS = tuple(op.value for op in ControlOp)
"""The commands this module registers and runs."""


def add_commands(commands: Any) -> None:
    """Register every command that talks to a running daemon."""

    def command(name: str, summary: str, example: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            str(name), help=summary, description=summary, epilog=f"example:\n  {example}",
            formatter_class=Formatter,
        )  # fmt: skip
        sub.add_argument(
            "--socket", default=default_socket(), help="the daemon's socket ($TETHER_AGENTD)"
        )
        return sub

    ps = command(ControlOp.PS, "list the daemon's sessions", "tether ps --state stalled")
    ps.add_argument("--json", action="store_true", help="one JSON document, every field")
    ps.add_argument("--no-headers", action="store_true", help="rows only (for scripts)")
    ps.add_argument(
        "--state",
        action="append",
        choices=[state.value for state in SessionState],
        help="only sessions in this state (repeatable)",
    )
    ps.add_argument(
        "--watch",
        nargs="?",
        type=positive(float),
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="show it again every SECONDS (2 if not given) until interrupted",
    )
    start = command(
        ControlOp.START, "start a session's harness, or reattach to it", "tether start s1"
    )
    start.add_argument("session", help="the session's name")
    send = command(
        ControlOp.SEND, "deliver a prompt to a session's harness",
        "echo 'fix the tests' | tether send s1 -",
    )  # fmt: skip
    send.add_argument("session", help="the session's name")
    send.add_argument("text", help="the prompt, or - to read it from stdin (out of ps's sight)")
    send.add_argument(
        "--timeout", type=positive(float), default=None, metavar="SECONDS",
        help="give up waiting for the answer after SECONDS (exit 75); a queued prompt is"
        " still delivered",
    )  # fmt: skip
    waits = send.add_mutually_exclusive_group()
    waits.add_argument(
        "--no-wait", dest="wait", action="store_false",
        help="answer once the prompt is queued, not once an engine has recorded it",
    )  # fmt: skip
    waits.add_argument(
        "--wait-reply", action="store_true",
        help="answer once the prompt's turn has ended, with its reply; exit 1 if the turn"
        " failed (the model request failed, the engine said so, or a death cut it)",
    )  # fmt: skip
    send.add_argument(
        "--id", dest="prompt_id", default=None, metavar="ID",
        help="the prompt's id (default: a new one, named if the send fails): sending it again"
        " with the same id delivers it once",
    )  # fmt: skip
    for name, summary in (
        (
            ControlOp.STOP,
            "stop a session's harness tree; it stays down until the next start or send",
        ),
        (ControlOp.RESET, "clear a failed session's failure and its restart count"),
    ):
        sub = command(name, summary, f"tether {name} s1")
        sub.add_argument("session", help="the session's name")
    for sub in (commands.choices[op] for op in ControlOp if op.can_create):
        sub.add_argument(
            "--create", action="store_true", help="act even if the daemon knows no such session"
        )
    events = command(
        ControlOp.EVENTS, "show the daemon's events (what subscribe() sees)",
        "tether events --follow --session s1",
    )  # fmt: skip
    events.add_argument("--follow", "-f", action="store_true", help="keep showing new events")
    events.add_argument("--session", default="", help="only this session's events")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.add_argument(
        "--lines", "-n", type=positive(int), default=20, help="how many past events first"
    )
    inspect = command(
        ControlOp.INSPECT, "show inside a session's live harness: every task, where it waits"
        " and on what (a channel and who holds it, a lock, a tool's processes), its turn",
        "tether inspect s1",
    )  # fmt: skip
    inspect.add_argument("session", help="the session's name")
    inspect.add_argument("--json", action="store_true", help="the snapshot as one JSON document")
    logs = command(ControlOp.LOGS, "show a session's harness log", "tether logs s1 -f")
    logs.add_argument("session", help="the session's name")
    logs.add_argument("--follow", "-f", action="store_true", help="keep showing what is added")
    logs.add_argument(
        "--lines", "-n", type=positive(int), default=50, help="how many past lines first"
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run one of the commands ``add_commands`` registered; the exit status. A one-shot
    request runs without trio (``_request``); the streams and ``ps --watch`` run on it."""
    op = ControlOp(args.command)
    if op.streams or (op is ControlOp.PS and args.watch is not None):
        import trio

        try:
            return trio.run(_stream if op.streams else _watch, args, out)
        except KeyboardInterrupt:
            return 0
    text = getattr(args, "text", "")
    if text == "-":
        text = sys.stdin.read()
    if op is ControlOp.SEND:
        args.prompt_id = args.prompt_id or uuid.uuid4().hex
    try:
        result = _request(args, text)
    except CliError as exc:
        if op is ControlOp.SEND and exc.code in (EX_TEMPFAIL, EX_PROTOCOL):
            again = f"tether send --id {args.prompt_id} {args.session} ..."
            exc.message += f" (the prompt may still be delivered: `{again}` delivers it once)"
        raise
    if op is ControlOp.SEND and args.wait_reply:
        return _turn(result, args, out)
    if op is ControlOp.PS:
        out.write(_ps(result, args))
    elif op is ControlOp.INSPECT:
        out.write(_inspected(result, as_json=args.json))
    else:
        out.write(json.dumps(result) + "\n")
    return 0


def _request(args: argparse.Namespace, text: str) -> dict[str, Any]:
    return request(
        args.socket, args.command, getattr(args, "session", ""), text,
        create=getattr(args, "create", False), wait=getattr(args, "wait", True),
        prompt_id=getattr(args, "prompt_id", None) or "",
        wait_reply=getattr(args, "wait_reply", False), timeout=getattr(args, "timeout", None),
    )  # fmt: skip


def _turn(result: dict[str, Any], args: argparse.Namespace, out: TextIO) -> int:
    """``send --wait-reply``: the answer as JSON; a failed turn is also one line and exit 1."""
    out.write(json.dumps(result) + "\n")
    turn = result.get("turn")
    if not isinstance(turn, dict):  # a daemon before wire revision 6 answers on delivery
        raise CliError(EX_UNAVAILABLE, "this agentd does not wait for replies (upgrade it)")
    if turn.get("failure"):
        status = f" {turn['status']}" if turn.get("status") else ""
        raise CliError(
            EX_TURN_FAILED,
            f"session {args.session!r}: prompt {args.prompt_id}: the turn failed:"
            f" {turn['failure']}{status}: {turn.get('detail', '')}",
        )
    return 0


def _ps(result: dict[str, Any], args: argparse.Namespace) -> str:
    rows = result["sessions"]
    if args.state:
        rows = [row for row in rows if row["state"] in args.state]
    if args.json:
        return json.dumps({"sessions": rows}, indent=2) + "\n"
    return table(rows, headers=not args.no_headers)


def _inspected(result: dict[str, Any], *, as_json: bool) -> str:
    if as_json:
        return json.dumps(result, indent=2) + "\n"
    from ..inspect._render import render

    head = (f"session {result['session']}: harness pid {result['pid']}, epoch {result['epoch']},"
            f" {result['state']}")  # fmt: skip
    return head + "\n" + render(result["snapshot"])


async def _watch(args: argparse.Namespace, out: TextIO) -> int:
    import trio

    from ..agentd._client import request as ask

    clear = "\x1b[H\x1b[2J" if out.isatty() else ""
    while True:
        shown = _ps(await ask(args.socket, args.command), args)
        out.write(clear + shown + ("" if clear else "\n"))
        out.flush()
        await trio.sleep(args.watch)


async def _stream(args: argparse.Namespace, out: TextIO) -> int:
    from ..agentd._client import stream
    from ..wire import Control

    op = ControlOp(args.command)
    control = Control(op, args.session, follow=args.follow, lines=args.lines)
    async for item in stream(args.socket, control):
        if op is ControlOp.LOGS:
            out.write(item.get("text", ""))
        elif args.json:
            out.write(json.dumps(item["event"]) + "\n")
        else:
            out.write(_event_line(item["event"]) + "\n")
        out.flush()
    return 0


def _event_line(event: dict[str, Any]) -> str:
    parts = [event.get("time", "-"), event["session"], event["kind"]]
    for key in ("epoch", "pid", "prompt_id", "attempt", "code", "failure", "status"):
        if event.get(key) is not None:
            parts.append(f"{key}={event[key]}")
    if event.get("detail"):
        parts.append(event["detail"])
    return " ".join(str(part) for part in parts)
