"""Incident 004's daemon side: reattach to a healthy harness, replace a phantom, never loop.

A real ``Agentd`` on a temporary socket and SQLite store starts ``python -m tether.harness.example``
for a session, reattaches to it, then the harness freezes its whole process (the example's
wedge switch): the next ``start_agent`` finds no pong within ``miss_limit`` heartbeats, stops
the phantom's tree and respawns with a greater epoch, and the next prompt is delivered on the
first attempt. Then a harness that crashes at once: the restart limit fails the session and the
delivery ends with the reason instead of 22 attempts over 15 minutes.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import trio

from ..agentd import Agentd, AgentEvent, DeliveryFailed
from ..channels import Receiver
from ..epochs import SqliteEpochStore
from ..process import find_twins
from ._timeline import Timeline, Verdict

HEARTBEAT, MISS, GRACE = 0.2, 3, 0.2
PATIENCE = HEARTBEAT * MISS


async def _show(log: Timeline, feed: Receiver[AgentEvent]) -> None:
    async for event in feed:
        where = f"epoch {event.epoch} pid {event.pid}" if event.pid else ""
        log.event("agentd", f"{event.session}: {event.kind} {where} {event.detail}".rstrip())


async def replay_phantom(log: Timeline) -> list[Verdict]:
    """Spawn, reattach, phantom replaced, delivered; then a crash loop failed by its limit."""
    with log.logs("tether.process"), tempfile.TemporaryDirectory(prefix="tether-demo-") as tmp:
        root = Path(tmp)  # mkdtemp made it 0700
        wedge = root / "wedge"
        env = {**os.environ, "TETHER_EXAMPLE_WEDGE_FILE": str(wedge)}
        async with SqliteEpochStore(root / "epochs.sqlite3") as store:
            agentd = Agentd(
                store,
                root / "agentd.sock",
                [sys.executable, "-m", "tether.harness.example"],
                heartbeat=HEARTBEAT,
                miss_limit=MISS,
                grace=GRACE,
                env=env,
            )
            async with (
                agentd.running(stop_harnesses=True),
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(_show, log, agentd.subscribe())
                first = await agentd.start_agent("s1")
                started = time.perf_counter()
                again = await agentd.start_agent("s1")
                reattach = time.perf_counter() - started
                log.event("demo", f"start_agent: {again.how} in {reattach * 1000:.2f} ms")
                wedge.touch()
                with trio.fail_after(10):
                    while wedge.exists():  # noqa: ASYNC110 - the harness removes it, then freezes
                        await trio.sleep(0.01)
                log.event("demo", f"harness pid {first.pid} froze: its loop no longer answers")
                started = time.perf_counter()
                fresh = await agentd.start_agent("s1")
                replaced = time.perf_counter() - started
                left = [ref for ref in find_twins("s1", epoch=first.epoch)]
                delivered = await agentd.deliver("s1", "are you there?")
                nursery.cancel_scope.cancel()
        crash = await _crash_loop(log, root)
    bound = PATIENCE + 2 * GRACE + 1.0
    return [
        Verdict(
            "a healthy harness is reattached, not replaced",
            again.how == "reattached" and again.pid == first.pid,
            f"{reattach * 1000:.2f} ms, same pid",
        ),
        Verdict(
            "a phantom is replaced with a greater epoch within the bound",
            fresh.how == "respawned" and fresh.epoch > first.epoch and replaced <= bound,
            f"{replaced:.2f} s (bound {bound:.1f} s), epoch {first.epoch} -> {fresh.epoch}",
        ),
        Verdict("the phantom's tree is gone", not left, f"{len(left)} processes of its epoch"),
        Verdict(
            "the next prompt reaches the fresh harness at once",
            delivered.pid == fresh.pid and delivered.attempts == 1,
            f"attempt {delivered.attempts}",
        ),
        Verdict("a crash loop ends at the restart limit, with the reason", *crash),
    ]


async def _crash_loop(log: Timeline, root: Path) -> tuple[bool, str]:
    crash = [sys.executable, "-c", "raise SystemExit(3)"]
    started = time.perf_counter()
    async with SqliteEpochStore(root / "crash.sqlite3") as store:
        agentd = Agentd(store, root / "crash.sock", crash, grace=GRACE, restart_limit=(2, 60.0))
        async with agentd.running():
            failures: list[DeliveryFailed] = []
            for _ in range(2):
                try:
                    await agentd.deliver("s2", "hello")
                except DeliveryFailed as exc:
                    failures.append(exc)
                    log.event("demo", f"s2: DeliveryFailed after {len(exc.attempts)} attempts")
                    for attempt in exc.attempts:
                        log.event("demo", f"  {attempt}")
            (status,) = agentd.status()
    took = time.perf_counter() - started
    held = len(failures) == 2 and "restart limit" in failures[-1].reason
    return held, f"{status.state} after {status.restarts} restarts, {took:.2f} s"
