"""The harness's cost per streamed chunk against a bare httpx reader of the same stream.

Run with ``make bench`` (or ``python benchmarks/model_stream.py [--chunks N] [--rounds R]``).
An OpenAI-compatible server (``tether.testing.FakeModel``, in a process of its own so that
sending costs neither side) streams N one-character chat completion chunks per request. The
bare reader is what any client must do at least: httpx's ``aiter_lines``, each ``data:`` line
``json.loads``ed. The harness's path is ``tether.harness.openai``'s own: the same lines through
its event parser, each chunk's delta added up, tool calls merged, and the turn's stream clock
marked. Rounds alternate the two; the table shows medians (target: at most 1.2x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import httpx
import trio

from tether.harness.openai._stream import complete
from tether.liveness import StreamClock

SERVER = """
import sys, trio
from tether.testing import FakeModel
fake = FakeModel([[("chunks", int(sys.argv[1]))]] * 10_000)
async def main():
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        print(fake.port, flush=True)
trio.run(main)
"""
PAYLOAD = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "go"}]}


async def bare(client: httpx.AsyncClient, url: str) -> int:
    """Read one stream as a minimal client would; the chunks read."""
    chunks = 0
    async with client.stream("POST", url, json=PAYLOAD) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                if data == "[DONE]":
                    break
                json.loads(data)
                chunks += 1
    return chunks


async def harness(client: httpx.AsyncClient, url: str) -> int:
    """Read one stream as the harness's engine does; the chunks read."""
    reply = await complete(client, url, PAYLOAD, {}, StreamClock("fake"))
    return reply.chunks


async def measure(port: int, chunks: int, rounds: int) -> tuple[list[float], list[float]]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    plain: list[float] = []
    ours: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        await bare(client, url)  # warm both paths up
        await harness(client, url)
        for _ in range(rounds):
            for read, into in ((bare, plain), (harness, ours)):
                started = time.perf_counter()
                count = await read(client, url)
                into.append((time.perf_counter() - started) / count)
    return plain, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.chunks)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        plain, ours = trio.run(measure, port, args.chunks, args.rounds)
    finally:
        server.terminate()
        server.wait()
    p, o = statistics.median(plain), statistics.median(ours)
    print(f"## Per streamed chunk ({args.chunks:,} chunks a stream, median of {args.rounds})\n")
    print("| reader | µs per chunk | tether / bare |")
    print("| --- | ---: | ---: |")
    print(f"| bare httpx SSE reader (aiter_lines + json.loads) | {p * 1e6:.2f} | |")
    print(f"| tether.harness.openai (events, deltas, stream clock) | {o * 1e6:.2f} | {o / p:.2f} |")


if __name__ == "__main__":
    main()
