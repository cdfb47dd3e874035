"""The load runs' harness (``agentd_load.py``, ``delivery.py``): a real ``run_harness`` whose
engine takes each prompt (which the harness records in its transcript, durably, as it is
taken) and does nothing else, so a run can count what every engine saw. With
``TETHER_BENCH_REVISION=3`` it speaks wire revision 3, whose daemon counts a prompt delivered
once the loop has read it (the delivery of before ADR 0034), for ``delivery.py``'s
comparison. ``TETHER_BENCH_BACKEND=asyncio`` runs it under ``asyncio.run``
(``harness_loops.py``)."""

from __future__ import annotations

import os

import anyio.lowlevel

import tether.harness._loop as loop
from tether import HarnessContext, Receiver, run_harness
from tether.harness import Command


async def engine(commands: Receiver[Command], ctx: HarnessContext) -> None:
    async for _ in commands:
        pass
    await anyio.lowlevel.checkpoint()


if __name__ == "__main__":
    loop.REVISION = int(os.environ.get("TETHER_BENCH_REVISION", loop.REVISION))
    backend = os.environ.get("TETHER_BENCH_BACKEND")
    raise SystemExit(run_harness(engine, **({"backend": backend} if backend else {})))
