"""Incident 004 on a real harness: a Superseded rejection really exits, even with a stray clone.

A fake agentd built from ``tether.wire`` welcomes ``python -m tether.harness.example``, sends it a
prompt (so a child agent runs), then answers ``Superseded``. The harness exits 75, its child
agent got SIGINT, and nothing of the session is left. Then the bug on purpose: an engine that
keeps a strong clone of its command sender; the harness still exits, and its last log line
names the line that held the clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from .. import wire
from ..journal import ToolCall
from ..journal._disk import scan
from ..process import find_twins
from ._timeline import Timeline, Verdict

GRACE = 0.5


class _Daemon:
    def __init__(self) -> None:
        self.prompted = trio.Event()
        self.supersede = trio.Event()

    async def handle(self, connection: wire.Connection) -> None:
        hello = await connection.receive()
        assert isinstance(hello, wire.Hello)
        await connection.send(wire.Welcome(hello.session, hello.epoch, 1.0))
        await connection.send(wire.Prompt("p1", "think", {}))
        self.prompted.set()
        await self.supersede.wait()
        await connection.send(wire.Superseded(hello.session, hello.epoch, hello.epoch + 1))
        await trio.sleep_forever()


async def _until_agent_runs(transcript: Path, session: str) -> None:
    # Bounded polling (the caller's fail_after): the harness only leaves files and processes.
    while not _agent_running(transcript) or not find_twins(session):  # noqa: ASYNC110
        await trio.sleep(0.01)
    await trio.sleep(0.2)  # time for the agent to install its SIGINT handler


def _agent_running(transcript: Path) -> bool:
    # The journal's own reader: it stops cleanly at a line the harness is still writing.
    entries, _, _ = scan(transcript.read_bytes()) if transcript.exists() else ([], 0, "")
    return any(isinstance(entry, ToolCall) for entry in entries)


async def _one(log: Timeline, root: Path, stray: bool) -> tuple[int, float, str, int, str]:
    daemon = _Daemon()
    sock = root / ("stray.sock" if stray else "agentd.sock")
    session = f"demo-harness-{os.getpid()}-{int(stray)}"
    signals_file = root / f"{session}.signals"
    env = {
        **os.environ,
        "TETHER_SESSION": session,
        "TETHER_EPOCH": "7",
        "TETHER_AGENTD": str(sock),
        "TETHER_STATE_DIR": str(root),
        "TETHER_GRACE": str(GRACE),
        "TETHER_EXAMPLE_SIGNAL_FILE": str(signals_file),
        **({"TETHER_EXAMPLE_STRAY_CLONE": "1"} if stray else {}),
    }
    async with trio.open_nursery() as nursery:
        await nursery.start(wire.serve, sock, daemon.handle)
        harness = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tether.harness.example"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert harness.stderr is not None
        with trio.fail_after(30):
            await daemon.prompted.wait()
            await _until_agent_runs(root / f"{session}.jsonl", session)
        log.event("agentd", f"harness pid {harness.pid} runs a child agent; sends Superseded(8)")
        started = trio.current_time()
        daemon.supersede.set()
        chunks = []
        with trio.fail_after(2 * GRACE + 5):
            while chunk := await harness.stderr.receive_some():
                chunks.append(chunk)
            code = await harness.wait()
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    last = b"".join(chunks).decode().strip().splitlines()[-1]
    log.event("harness", f"exit {code} after {took * 1000:.0f} ms; last log line:")
    log.event("harness", f"  {last.split(' ', 2)[-1]}")
    heard = signals_file.read_text().strip() if signals_file.exists() else "nothing"
    return code, took, last, len(find_twins(session)), heard


async def replay_superseded_harness(log: Timeline) -> list[Verdict]:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        root = Path(tmp)
        code, took, _, left, heard = await _one(log, root, stray=False)
        log.event("agent", f"heard: {heard}")
        stray_code, stray_took, last, stray_left, _ = await _one(log, root, stray=True)
    bound = 2 * GRACE + 1
    return [
        Verdict(
            "a Superseded harness exits 75 within the bound",
            code == 75 and took <= bound,
            f"{took * 1000:.0f} ms",
        ),
        Verdict("its child agent gets SIGINT", heard == "agent got SIGINT", heard),
        Verdict(
            "nothing of the session survives",
            left == 0 and stray_left == 0,
            f"{left + stray_left} left",
        ),
        Verdict(
            "with a stray sender clone it still exits in time",
            stray_code == 75 and stray_took <= bound,
            f"{stray_took * 1000:.0f} ms",
        ),
        Verdict(
            "the last log line names the clone's holder",
            "example.py:" in last,
            last[last.find("example.py:") :].split(" ")[0] if "example.py:" in last else "-",
        ),
    ]
