"""Exactly-once delivery's price (issue 27, ADR 0034): the time per delivered prompt of a burst
through ``tether agentd`` (a real daemon process, real harnesses: ``load_harness.py``), when a
prompt counts as delivered once the harness has recorded it as its engine took it (wire
revision 4), against the same daemon and harnesses counting it delivered once the harness's
loop has read it (revision 3, the delivery of before). The work is the same in both: every
harness records every prompt durably as its engine takes it; only the moment ``send`` is
answered differs. Rounds alternate the two; each starts its own daemon and sessions.

``python benchmarks/delivery.py [--sessions 200] [--sends 1000] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from tether.agentd._client import request

HERE = Path(__file__).parent


async def burst(workdir: Path, revision: int, sessions: int, sends: int) -> float:
    """Seconds per delivered prompt of one burst of ``sends`` over ``sessions`` sessions."""
    workdir.mkdir(mode=0o700)
    sock = workdir / "agentd.sock"
    with open(workdir / "agentd.log", "wb") as log:  # noqa: ASYNC230
        daemon = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in a thread
            [sys.executable, "-m", "tether", "agentd", "--socket", str(sock), "--heartbeat",
             "1", "--stop-harnesses", "--", sys.executable, str(HERE / "load_harness.py")],
            stdout=log, stderr=log, env={**os.environ, "TETHER_BENCH_REVISION": str(revision)},
        )  # fmt: skip
    names = [f"d{revision}-{i:03}" for i in range(sessions)]
    try:
        while not sock.exists():
            await trio.sleep(0.05)
        for i in range(0, sessions, 10):
            async with trio.open_nursery() as batch:
                for name in names[i : i + 10]:
                    batch.start_soon(request, str(sock), "start", name)
        delivered = 0

        async def send(n: int) -> None:
            nonlocal delivered
            answer = await request(str(sock), "send", names[n % sessions], f"prompt-{n}")
            delivered += answer.get("recorded", False) == (revision >= 4)

        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for n in range(sends):
                nursery.start_soon(send, n)
        took = time.monotonic() - started
        assert delivered == sends, f"{delivered} of {sends} delivered as revision {revision}"
        return took / sends
    finally:
        daemon.send_signal(signal.SIGTERM)
        await trio.to_thread.run_sync(daemon.wait)


async def main(sessions: int, sends: int, rounds: int) -> None:
    times: dict[int, list[float]] = {3: [], 4: []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            for revision in (4, 3) if round_ % 2 == 0 else (3, 4):
                workdir = Path(tmp) / f"r{round_}-{revision}"
                times[revision].append(await burst(workdir, revision, sessions, sends))
    new, old = statistics.median(times[4]), statistics.median(times[3])
    print(f"\ndelivery (issue 27): {sessions} sessions, bursts of {sends} sends, {rounds} rounds\n")
    print("| measure | tether (recorded) | read by the loop | ratio |")
    print("| --- | --- | --- | --- |")
    print(
        f"| time per delivered prompt | {new * 1e3:.2f} ms | {old * 1e3:.2f} ms"
        f" | {new / old:.2f}x |"
    )
    spread = ", ".join(f"{a / b:.2f}" for a, b in zip(times[4], times[3], strict=True))
    print(f"\nper-round ratios: {spread} (target <= 1.3x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trio.run(main, args.sessions, args.sends, args.rounds)
