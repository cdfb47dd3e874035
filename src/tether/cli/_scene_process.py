"""Incident 000 in miniature: SIGTERM arrives while a tool's processes, some escaped, still run.

This process reads SIGTERM through ``tether.signals`` and owns a ``ChildGroup`` whose tool has a
plain child, a ``setsid`` child, a ``nohup`` child and a double-forked daemon; the tool call is
in the transcript before the tool starts. A separate process sends SIGTERM; the sender is named,
the group is left, every process that carried the session's mark is gone and reaped, and the
resumed transcript seals the call as ``aborted``, naming the signal and its sender.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import psutil
import trio

from .. import signals
from ..journal import ToolResult, Transcript
from ..process import ChildGroup, find_twins
from ._timeline import Timeline, Verdict

GRACE = 0.5

_TOOL = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.Popen(["sleep", "600"])
subprocess.Popen(["setsid", "sleep", "600"])
subprocess.Popen(["nohup", "sleep", "600"], **quiet)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "600"])
    os._exit(0)
os.wait()
open(sys.argv[1], "w").close()
time.sleep(600)
"""


def _marked_alive(session: str) -> int:
    """Live processes carrying the session's mark, found by scanning every process."""
    return len(find_twins(session))


def _zombies() -> int:
    count = 0
    for process in psutil.Process().children():
        try:
            count += process.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
    return count


async def replay_sigterm_tree(log: Timeline) -> list[Verdict]:
    session = f"demo-{os.getpid()}"
    with tempfile.TemporaryDirectory() as workdir:
        ready = os.path.join(workdir, "ready")
        transcript_path = os.path.join(workdir, f"{session}.jsonl")
        # Signals first, before anything starts a thread: a thread that exists before the
        # block could take the SIGTERM itself, and then its sender is unknown (ADR 0004).
        async with signals.receive(signal.SIGTERM) as events:
            transcript = await Transcript.open(transcript_path)
            call = await transcript.tool_call("bash", {"cmd": "a tool that daemonizes"})
            log.event("journal", f"tool call {call.id} is on disk before the tool runs")
            async with ChildGroup(session, 1, grace=GRACE) as group:
                await group.spawn([sys.executable, "-c", _TOOL, ready], name="tool")
                with trio.fail_after(30):  # bounded polling: the tool can only leave a file
                    while not (os.path.exists(ready) and _marked_alive(session) == 5):  # noqa: ASYNC110, ASYNC240
                        await trio.sleep(0.01)
                log.event(
                    "tool",
                    f"runs with {len(group.members()) - 1} descendants:"
                    " plain, setsid, nohup, double-forked",
                )
                killer = await trio.lowlevel.open_process(
                    ["sh", "-c", 'kill -TERM "$0"; sleep 0.2', str(os.getpid())],
                    stdin=subprocess.DEVNULL,
                )
                with trio.fail_after(5):
                    event = await events.recv()
                log.event("signals", event.describe())
                await killer.wait()
                stopping = trio.current_time()
            took = trio.current_time() - stopping
        survivors = _marked_alive(session)
        zombies = _zombies()
        log.event(
            "group", f"left in {took * 1000:.0f} ms: {survivors} survivors, {zombies} zombies"
        )
        await transcript.aclose()  # the worker dies here without writing a result
        why = f"worker shut down mid-call (SIGTERM from pid {event.sender_pid})"
        async with await Transcript.open(transcript_path, resume=True, reason=why) as resumed:
            sealed = [e for e in resumed.entries if isinstance(e, ToolResult)]
            dangling = len(resumed.dangling())
        for result in sealed:
            log.event(
                "journal", f"resume sealed {result.call_id}: {result.status}, {result.reason}"
            )
    return [
        Verdict(
            "the SIGTERM's sender is named",
            event.sender_pid == killer.pid,
            f"pid={event.sender_pid}",
        ),
        Verdict(
            "no process of the session survives its owner", survivors == 0, f"{survivors} survivors"
        ),
        Verdict("every orphan is reaped", zombies == 0, f"{zombies} zombies"),
        Verdict(
            "the teardown is bounded by 2 x grace + 1 s",
            took <= 2 * GRACE + 1,
            f"{took * 1000:.0f} ms",
        ),
        Verdict(
            "the resumed transcript seals the call, naming the sender",
            dangling == 0 and [r.reason for r in sealed] == [why],
            f"{len(sealed)} aborted, {dangling} dangling",
        ),
    ]
