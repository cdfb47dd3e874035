"""The daemon's memory under half-written frames (issue 26): 1,600 connections each announce a
1 MiB frame and keep sending all of it but its last byte for 5 s; then they close.

tether (``tether agentd``) against the plain way to read length-prefixed frames on trio (a
server that reads the header, then ``receive_some`` until the body is buffered: what tether's
reader did before its frame budget), each in its own process and measured the same way: RSS
idle, at the peak of the flood, and once every connection has been closed for 12 s (past
tether's 10 s frame timeout).

    .venv/bin/python benchmarks/flood.py [--connections 1600]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

NAIVE = """
import os, resource, struct, sys, trio
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
async def serve(stream):
    buffer = bytearray()
    async with stream:
        try:
            while len(buffer) < 4:
                buffer += await stream.receive_some(65536) or b"!" * 4
            (size,) = struct.unpack(">I", buffer[:4])
            while len(buffer) < 4 + size:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
        except trio.BrokenResourceError:
            return
async def main():
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(sys.argv[1])
    sock.listen(4096)
    print("ready", flush=True)
    await trio.serve_listeners(serve, [trio.SocketListener(sock)])
trio.run(main)
"""


def flood(path: str, count: int, seconds: float, process: psutil.Process) -> float:
    """Push ``count`` half-written 1 MiB frames at ``path`` for ``seconds``; peak RSS (MB)."""
    body = struct.pack(">I", 1 << 20) + b"x" * ((1 << 20) - 1)
    conns = []
    for _ in range(count):
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        conn.setblocking(False)
        conns.append(conn)
    sent = [0] * count
    peak = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, conn in enumerate(conns):
            try:
                sent[i] += conn.send(body[sent[i] : sent[i] + 65536])
            except OSError:
                continue
        peak = max(peak, process.memory_info().rss / 1e6)
        time.sleep(0.01)
    for conn in conns:
        conn.close()
    return peak


def measure(argv: list[str], path: Path, count: int) -> tuple[float, float, float]:
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        process = psutil.Process(server.pid)
        idle = process.memory_info().rss / 1e6
        peak = flood(str(path), count, 5.0, process)
        time.sleep(12.0)
        after = process.memory_info().rss / 1e6
        return idle, peak, after
    finally:
        server.terminate()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1600)
    count = parser.parse_args().connections
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    count = min(count, hard // 2 - 100)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o700)
        tether = measure(
            [sys.executable, "-m", "tether", "agentd", "--socket", str(base / "a.sock")],
            base / "a.sock", count,
        )  # fmt: skip
        naive = measure([sys.executable, "-c", NAIVE, str(base / "n.sock")], base / "n.sock", count)
    print(f"\n{count} connections, each all but the last byte of a 1 MiB frame for 5 s"
          f" ({os.cpu_count()} CPUs)\n")  # fmt: skip
    print("| daemon RSS (MB) | tether agentd | plain trio reader | tether / plain |")
    print("| --- | --- | --- | --- |")
    for name, a, b in zip(("idle", "peak", "12 s after they closed"), tether, naive, strict=True):
        print(f"| {name} | {a:.0f} | {b:.0f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
