"""Incident 004 end to end: a Superseded harness really exits, and the daemon never loops.

First in miniature, on channels: a stray clone keeps an engine waiting and ``holders()`` names
it. Then a real daemon and harness: the session is reclaimed with a new epoch (as another
daemon would), the old harness is told ``Superseded``, its child agent gets SIGINT, it exits
75 and is reaped, and the fresh harness takes the next prompt on the first attempt. Then the
old bug on purpose, a harness whose engine keeps a stray sender clone: it still exits, and its
log names the clone's line. Then a harness frozen whole (a phantom) is replaced within the
bound, and a crash loop ends at the restart limit instead of "22 delivery attempts".
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import attrs
import trio

from ..agentd import Attached, Delivered, DeliveryFailed
from ..process import find_twins
from ..wire import Prompt
from ._demo_daemon import GRACE, HEARTBEAT, MISS, demo_agentd, show_events, sleeper_running
from ._hostdelay import Stopwatch
from ._scene_channels import replay_drop, replay_move, replay_stray_clone
from ._timeline import Timeline, Verdict

BOUND = 2 * GRACE + 1
PATIENCE = HEARTBEAT * MISS


@attrs.frozen
class _Reclaimed:
    old: Delivered
    took: Stopwatch
    delivered: Delivered
    exit_line: str
    heard: str
    left: int


@attrs.frozen
class _Phantom:
    again: Attached
    reattach: float
    fresh: Attached
    replaced: Stopwatch
    left: int


async def supersede(
    log: Timeline, directory: Path, stray: bool, more: dict[str, str] | None = None
) -> _Reclaimed:
    """Reclaim a session whose harness (given ``more`` in its environment) runs a child agent;
    what happened."""
    session = "incident-004-stray" if stray else "incident-004"
    env = {"TETHER_EXAMPLE_STRAY_CLONE": "1"} if stray else {}
    env.update(more or {})
    async with demo_agentd(directory, env=env) as agentd, trio.open_nursery() as nursery:
        nursery.start_soon(show_events, log, agentd.subscribe())
        old = await agentd.deliver(session, "think hard")
        with trio.fail_after(20):  # the harness, its agent and the agent's sleeper
            while not sleeper_running(agentd, session, old.epoch):  # noqa: ASYNC110
                await trio.sleep(0.01)
        new_epoch = await agentd.store.bump(session)
        log.event("store", f"{session} reclaimed elsewhere: epoch {old.epoch} -> {new_epoch}")
        took = Stopwatch()
        await agentd.start_agent(session)
        took.stop()
        delivered = await agentd.deliver(session, Prompt("next", "carry on", {"steps": 1}))
        nursery.cancel_scope.cancel()
    harness_log = (directory / "sessions" / session / "harness.log").read_text()
    exit_line = next(
        (
            line
            for line in harness_log.splitlines()
            if f"exiting 75: superseded: epoch {old.epoch}" in line
        ),
        "",
    )
    signals = directory / "signals.txt"
    heard = signals.read_text().strip() if signals.exists() else ""
    return _Reclaimed(
        old,
        took,
        delivered,
        exit_line,
        heard,
        len(find_twins(session, epoch=old.epoch, store=agentd.store_id)),
    )


async def _crash_loop(log: Timeline, directory: Path) -> tuple[bool, str]:
    crash = [sys.executable, "-c", "raise SystemExit(3)"]
    started = time.perf_counter()
    async with demo_agentd(directory, crash) as agentd:
        failures: list[DeliveryFailed] = []
        for _ in range(2):
            try:
                await agentd.deliver("crash-loop", "hello")
            except DeliveryFailed as exc:
                failures.append(exc)
                log.event("agentd", f"DeliveryFailed after {len(exc.attempts)} attempts:")
                for attempt in exc.attempts:
                    log.event("agentd", f"  {attempt}")
        (status,) = agentd.status()
    took = time.perf_counter() - started
    held = len(failures) == 2 and "restart limit" in failures[-1].reason
    return held, f"{status.state} after {status.restarts} restarts, {took:.2f} s"


async def _phantom(log: Timeline, directory: Path) -> _Phantom:
    async with demo_agentd(directory) as agentd, trio.open_nursery() as nursery:
        nursery.start_soon(show_events, log, agentd.subscribe())
        first = await agentd.start_agent("phantom")
        started = time.perf_counter()
        again = await agentd.start_agent("phantom")
        reattach = time.perf_counter() - started
        wedge = directory / "wedge"
        wedge.touch()
        with trio.fail_after(10):
            while wedge.exists():  # noqa: ASYNC110 - the harness removes it, then freezes
                await trio.sleep(0.01)
        log.event("demo", f"harness pid {first.pid} froze whole: its loop no longer answers")
        replaced = Stopwatch()
        fresh = await agentd.start_agent("phantom")
        replaced.stop()
        left = len(find_twins("phantom", epoch=first.epoch, store=agentd.store_id))
        nursery.cancel_scope.cancel()
    return _Phantom(again, reattach, fresh, replaced, left)


async def replay_superseded(log: Timeline, root: Path) -> list[Verdict]:
    """The scenario; its verdicts."""
    verdicts = [*await replay_stray_clone(log), *await replay_move(log), *await replay_drop(log)]
    plain_dir, stray_dir, phantom_dir, crash_dir = (root / f"004-{n}" for n in ("a", "b", "c", "d"))
    for directory in (plain_dir, stray_dir, phantom_dir, crash_dir):
        directory.mkdir(mode=0o700)
    with log.logs("tether.process"):
        plain = await supersede(log, plain_dir, stray=False)
        stray = await supersede(log, stray_dir, stray=True)
        phantom = await _phantom(log, phantom_dir)
        crash = await _crash_loop(log, crash_dir)
    bound = PATIENCE + 2 * GRACE + 1.0
    return [
        *verdicts,
        *superseded_verdicts(plain, stray),
        Verdict(
            "a healthy harness is reattached, not replaced",
            phantom.again.how == "reattached",
            f"{phantom.reattach * 1000:.2f} ms",
        ),
        Verdict.timed(
            "a phantom is replaced with a greater epoch within the bound",
            phantom.fresh.how == "respawned" and phantom.left == 0,
            phantom.replaced,
            bound,
        ),
        Verdict("a crash loop ends at the restart limit, with the reason", *crash),
    ]


def superseded_verdicts(plain: _Reclaimed, stray: _Reclaimed) -> list[Verdict]:
    """What a reclaimed session's harness must do, with and without a stray clone."""
    holder = re.search(r"held by: .* at \S*(example\.py:\d+)", stray.exit_line)
    return [
        Verdict.timed(
            "a Superseded harness exits 75 and is reaped within the bound",
            bool(plain.exit_line),
            plain.took,
            BOUND,
        ),
        Verdict(
            "its child agent gets SIGINT", "agent got SIGINT" in plain.heard, plain.heard or "-"
        ),
        Verdict(
            "the fresh harness takes the next prompt on the first attempt",
            plain.delivered.attempts == 1 and plain.delivered.epoch > plain.old.epoch,
            f"attempt {plain.delivered.attempts}, epoch {plain.delivered.epoch}",
        ),
        Verdict.timed(
            "with a stray sender clone the harness still exits 75 in time",
            bool(stray.exit_line),
            stray.took,
            BOUND,
        ),
        Verdict(
            "its last log line names the clone's holder",
            holder is not None,
            holder.group(1) if holder else "-",
        ),
        Verdict(
            "nothing of a superseded harness survives",
            plain.left == 0 and stray.left == 0,
            f"{plain.left + stray.left} left",
        ),
    ]
