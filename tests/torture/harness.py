"""The campaign's harness (run by ``tether agentd``): each prompt is JSON naming a tool's exit
code, how long it sleeps and a token; the engine runs it through ``ctx.run_tool`` and, once
the result is durable in the transcript, appends an acknowledgement to ``torture.jsonl`` in
the session's directory. The campaign checks both against each other and against the
exit codes it asked for. A harness of an odd epoch runs under ``asyncio.run``, of an even one
under ``trio.run``: a session's harnesses alternate loops as they are replaced, and each reads
the transcript the other wrote."""

from __future__ import annotations

import errno
import json
import os
import sys

from tether import HarnessContext, Receiver, SpawnError, run_harness
from tether.harness import Command
from tether.wire import Prompt


def note(record: dict[str, object]) -> None:
    """Append one line to the session's ``torture.jsonl``, durably, whole or not at all: a
    full disk can take part of a line (``write`` returns short), which is cut off again and
    raised, as the transcript's own appends are (seed 110004761 tore a line this way)."""
    path = os.path.join(os.environ["TETHER_STATE_DIR"], "torture.jsonl")
    line = json.dumps({**record, "pid": os.getpid()}).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        start = os.fstat(fd).st_size
        if os.write(fd, line) != len(line):
            os.ftruncate(fd, start)
            raise OSError(errno.ENOSPC, "a note was cut short", path)
        os.fsync(fd)
    finally:
        os.close(fd)


async def engine(commands: Receiver[Command], ctx: HarnessContext) -> None:
    async for command in commands:
        if not isinstance(command, Prompt):
            continue
        note({"received": command.id})
        try:
            order = json.loads(command.text)
        except ValueError:
            continue
        token, code, sleep = str(order["token"]), int(order["code"]), float(order["sleep"])
        escape = "setsid sleep 300 & " if order.get("escape") else ""
        litter = int(order.get("litter", 0))  # a fork loop's leftovers, each in its own session
        if litter:
            escape += f"for i in $(seq {litter}); do setsid sleep 300 & done; "
        script = f'echo $$ > "$0.pid"; {escape}sleep {sleep}; exit {code}'
        marker = os.path.join(os.environ["TETHER_STATE_DIR"], token)
        try:
            result = await ctx.run_tool("torture", ["sh", "-c", script, marker], timeout=30)
        except SpawnError as exc:  # its keeper died during the spawn: answered `error`
            note({"token": token, "expect": code, "error": type(exc).__name__})
            continue
        note({"token": token, "expect": code, "got": result.returncode,
              "lost": result.status_lost, "timed_out": result.timed_out})  # fmt: skip


if __name__ == "__main__":
    odd = int(os.environ.get("TETHER_EPOCH", "0")) % 2
    sys.exit(run_harness(engine, backend="asyncio" if odd else "trio"))
