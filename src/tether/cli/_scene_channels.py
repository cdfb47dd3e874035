"""Incident 004 in miniature, on channels: a stray sender clone keeps the engine waiting."""

from __future__ import annotations

import gc
import warnings

import trio

from ..channels import ChannelClosed, Receiver, Sender, channel
from ._timeline import Timeline, Verdict, short_site


async def _engine(commands: Receiver[str], log: Timeline, done: trio.Event) -> None:
    async for command in commands:
        log.event("engine", f"handles {command!r}")
    log.ended_at = trio.current_time()
    log.event("engine", "ChannelClosed: every sender is gone, so the engine returns")
    done.set()


async def _connection(commands: Sender[str], log: Timeline) -> None:
    with commands:
        await commands.send("prompt #1")
        log.event("connection", "daemon answered Superseded: the loop returns, closing its sender")


async def replay_stray_clone(log: Timeline) -> list[Verdict]:
    tx, rx = channel(str, name="commands")
    engine_done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_engine, rx, log, engine_done)
        stray = tx.clone(name="main's stray clone")
        nursery.start_soon(_connection, tx.move(), log)
        with trio.move_on_after(0.2):
            await engine_done.wait()
        wedged = not engine_done.is_set()
        log.event("main", f"engine still waiting after 200 ms: {wedged}")
        holders = rx.holders()
        for holder in holders:
            log.event("main", f"holders(): {holder.name!r} at {short_site(holder.site)}")
        dropped_at = trio.current_time()
        stray.close()
        await engine_done.wait()
        wake = (log.ended_at - dropped_at) * 1e6
    return [
        Verdict("a stray clone keeps the engine waiting (the bug, shown)", wedged, "200 ms"),
        Verdict(
            "holders() names the line that kept it",
            [h.name for h in holders] == ["main's stray clone"],
            ", ".join(short_site(h.site) for h in holders),
        ),
        Verdict("closing the last sender wakes the engine", engine_done.is_set(), f"{wake:.0f} µs"),
    ]


async def replay_move(log: Timeline) -> list[Verdict]:
    tx, rx = channel(str, name="commands")
    engine_done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_engine, rx, log, engine_done)
        nursery.start_soon(_connection, tx.move(), log)
        started = trio.current_time()
        with trio.move_on_after(5):
            await engine_done.wait()
        took = (log.ended_at - started) * 1000
    try:
        await tx.send("late")
    except RuntimeError as exc:
        log.event("main", f"RuntimeError: {exc}")
        refused = True
    else:  # pragma: no cover - the demo reports it as FAIL
        refused = False
    return [
        Verdict("with move() the engine ends", engine_done.is_set(), f"{took:.2f} ms"),
        Verdict("the moved-from handle refuses use, naming where", refused, "RuntimeError"),
    ]


async def replay_drop(log: Timeline) -> list[Verdict]:
    tx, rx = channel(str, name="commands")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        del tx
        gc.collect()
    for warning in caught:
        log.event("gc", f"ResourceWarning: {warning.message}")
    try:
        with trio.fail_after(5):
            await rx.recv()
    except ChannelClosed:
        log.event("engine", "ChannelClosed after the sender was garbage-collected")
        closed = True
    else:  # pragma: no cover - the demo reports it as FAIL
        closed = False
    return [
        Verdict("a dropped sender closes the channel, as in Rust", closed, "1 finalizer"),
        Verdict(
            "the drop warns with the creation site", len(caught) == 1, f"{len(caught)} warning"
        ),
    ]
