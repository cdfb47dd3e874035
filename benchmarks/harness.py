"""How fast a harness really exits: Superseded to reaped, SIGTERM to reaped, in one run.

Run with ``make bench`` (or ``python benchmarks/harness.py [--cycles N]``). Each cycle starts
``python -m tether.harness.example`` against a fake agentd built from ``tether.wire`` in this
process, sends it a prompt so one child agent (which exits on SIGINT) is running, then either
sends ``Superseded`` or SIGTERMs the harness, and times until the harness process is reaped
(trio waits on its pidfd). The floor is spawning and reaping ``python -c pass`` in the same run.
Prints a markdown table: median and max per cause, and the median minus the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from tether import wire

GRACE = 0.5


class Daemon:
    """A fake agentd: welcomes, prompts once, supersedes on request."""

    def __init__(self) -> None:
        self.connected = trio.Event()
        self.supersede = trio.Event()

    async def handle(self, connection: wire.Connection) -> None:
        hello = await connection.receive()
        assert isinstance(hello, wire.Hello)
        await connection.send(wire.Welcome(hello.session, hello.epoch, 1.0))
        await connection.send(wire.Prompt("p", "bench", {}))
        self.connected.set()
        await self.supersede.wait()
        await connection.send(wire.Superseded(hello.session, hello.epoch, hello.epoch + 1))
        await trio.sleep_forever()


def _agent_running(transcript: Path) -> bool:
    if not transcript.exists():
        return False
    return any(
        json.loads(line).get("type") == "tool_call"
        for line in transcript.read_text().splitlines()
        if line.endswith("}")
    )


async def one_exit(socket_path: Path, workdir: Path, cycle: int, cause: str) -> float:
    daemon = Daemon()
    handler_box.append(daemon)
    session = f"bench-{os.getpid()}-{cause}-{cycle}"
    env = {
        **os.environ,
        "TETHER_SESSION": session,
        "TETHER_EPOCH": "1",
        "TETHER_AGENTD": str(socket_path),
        "TETHER_STATE_DIR": str(workdir),
        "TETHER_GRACE": str(GRACE),
    }
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tether.harness.example"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    transcript = workdir / f"{session}.jsonl"
    with trio.fail_after(30):
        await daemon.connected.wait()
        while not _agent_running(transcript):
            await trio.sleep(0.005)
        await trio.sleep(0.2)  # let the agent install its SIGINT handler
        started = time.perf_counter()
        if cause == "superseded":
            daemon.supersede.set()
        else:
            process.send_signal(signal.SIGTERM)
        code = await process.wait()
    took = time.perf_counter() - started
    expected = 75 if cause == "superseded" else 128 + signal.SIGTERM
    assert code == expected, f"{cause}: exit {code}"
    return took


handler_box: list[Daemon] = []


async def dispatch(connection: wire.Connection) -> None:
    await handler_box[-1].handle(connection)


async def floor_once() -> float:
    started = time.perf_counter()
    await trio.run_process([sys.executable, "-c", "pass"])
    return time.perf_counter() - started


async def main_async(cycles: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o700)
        socket_path = root / "agentd.sock"
        results: dict[str, list[float]] = {"superseded": [], "sigterm": [], "floor": []}
        async with trio.open_nursery() as nursery:
            await nursery.start(wire.serve, socket_path, dispatch)
            for cycle in range(cycles):
                for cause in ("superseded", "sigterm"):
                    results[cause].append(await one_exit(socket_path, root, cycle, cause))
                results["floor"].append(await floor_once())
            nursery.cancel_scope.cancel()
    floor = statistics.median(results["floor"])
    lines = [
        f"Harness exit, cause to reaped ({cycles} cycles each, grace {GRACE} s, one child agent)",
        "",
        "| cause | median | max | median - floor | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for cause in ("superseded", "sigterm"):
        median = statistics.median(results[cause])
        lines.append(
            f"| {cause} | {median * 1000:.0f} ms | {max(results[cause]) * 1000:.0f} ms"
            f" | {(median - floor) * 1000:.0f} ms | median < 150 ms + floor |"
        )
    lines.append(
        f"| floor: spawn and reap `python -c pass` | {floor * 1000:.0f} ms"
        f" | {max(results['floor']) * 1000:.0f} ms | 0 ms | |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    args = parser.parse_args(argv)
    for line in trio.run(main_async, args.cycles):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
