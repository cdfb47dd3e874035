"""``run_harness`` on both loops: the round trip of one prompt, trio against asyncio, in one run.

Run with ``make bench`` (or ``python benchmarks/harness_loops.py [--prompts N] [--rounds R]``).
A fake agentd built from ``tether.wire`` in this process (wire revision 6) sends a harness one
prompt at a time and waits for the harness to say the turn ended (``TurnEnded``): the harness
records the prompt durably in its transcript, hands it to the engine (``load_harness.py``,
which takes each prompt and does nothing else) and reports the turn over once the engine is
back at its channel. The harness runs under ``trio.run`` or under ``asyncio.run``
(``TETHER_BENCH_BACKEND``), alternately, each round a fresh process and transcript. Prints the
median round trip per prompt of each, and the ratio asyncio / trio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from tether import wire

HERE = Path(__file__).parent


class Daemon:
    """Sends ``prompts`` prompts one after another, each once the last one's turn ended."""

    def __init__(self, prompts: int) -> None:
        self.prompts = prompts
        self.times: list[float] = []
        self.done = trio.Event()

    async def handle(self, connection: wire.Connection) -> None:
        hello = await connection.receive()
        assert isinstance(hello, wire.Hello)
        await connection.send(wire.Welcome(hello.session, hello.epoch, 60.0, 6))
        for n in range(self.prompts):
            started = time.perf_counter()
            await connection.send(wire.Prompt(f"p{n}", "bench", {}))
            while True:
                message = await connection.receive()
                if isinstance(message, wire.TurnEnded) and message.prompt_id == f"p{n}":
                    break
            self.times.append(time.perf_counter() - started)
        self.done.set()
        await connection.send(wire.Superseded(hello.session, hello.epoch, hello.epoch + 1))
        await trio.sleep_forever()


async def one_round(socket_path: Path, root: Path, backend: str, n: int, prompts: int) -> float:
    """The median round trip of one harness process on ``backend``."""
    daemon = Daemon(prompts)
    current.append(daemon)
    state = root / f"{backend}-{n}"
    state.mkdir()
    env = {
        **os.environ,
        "TETHER_SESSION": f"bench-{backend}-{n}",
        "TETHER_EPOCH": "1",
        "TETHER_AGENTD": str(socket_path),
        "TETHER_STATE_DIR": str(state),
    }
    if backend != "trio":  # unset for trio: a tree before asyncio's support runs it too
        env["TETHER_BENCH_BACKEND"] = backend
    process = await trio.lowlevel.open_process(
        [sys.executable, str(HERE / "load_harness.py")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with trio.fail_after(120):
        await daemon.done.wait()
        code = await process.wait()
    assert code == 75, f"{backend}: exit {code}"
    return statistics.median(daemon.times[5:])  # past the first prompts (imports, warm-up)


current: list[Daemon] = []


async def dispatch(connection: wire.Connection) -> None:
    await current[-1].handle(connection)


async def main_async(prompts: int, rounds: int) -> list[str]:
    found: dict[str, list[float]] = {"trio": [], "asyncio": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o700)
        socket_path = root / "agentd.sock"
        async with trio.open_nursery() as nursery:
            await nursery.start(wire.serve, socket_path, dispatch)
            for n in range(rounds):
                for backend in ("trio", "asyncio"):
                    found[backend].append(await one_round(socket_path, root, backend, n, prompts))
            nursery.cancel_scope.cancel()
    trio_best, asyncio_best = min(found["trio"]), min(found["asyncio"])
    return [
        f"`run_harness` round trip per prompt ({prompts} prompts a round, best round of {rounds};"
        " prompt sent to turn ended, the prompt recorded durably)",
        "",
        "| harness loop | round trip | asyncio / trio |",
        "| --- | ---: | ---: |",
        f"| `trio.run` | {trio_best * 1e6:,.0f} µs | |",
        f"| `asyncio.run` | {asyncio_best * 1e6:,.0f} µs | {asyncio_best / trio_best:.2f} |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for line in trio.run(main_async, args.prompts, args.rounds):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
