"""``tether demo``: what is built so far, shown on live objects, and what is not built yet.

Today that is the channel layer replaying the core of incident 004 in one process: an engine
that never sees its command channel close because ``main`` kept a clone of the sender.
"""

from __future__ import annotations

import gc
import os
import warnings
from typing import TextIO

import attrs
import trio

from ..channels import ChannelClosed, Receiver, Sender, channel

_NOT_BUILT = (
    ("tether.signals", "signals with their sender's pid, uid and command line", "issue 3"),
    ("tether.process", "child groups, subreaper, twins, no survivors", "issue 3"),
    ("tether.journal / epochs", "sealed transcripts, fencing epochs in SQLite", "issue 4"),
    ("tether.wire / harness", "framed protocol; the harness that really exits", "issue 5"),
    ("tether.agentd", "spawn, reattach or respawn; `tether agentd`, `tether ps`", "issue 6"),
    ("tether.liveness / jobs", "suspend-aware stream clocks; the job controller", "issue 7"),
    ("tether.testing", "the trio deadlock detector and process-leak guard", "issue 8"),
    ("incident replays", "000, 003 and 004 on real processes; `tether run`", "issue 9"),
)


@attrs.define
class _Timeline:
    out: TextIO
    start: float = attrs.field(factory=trio.current_time)
    ended_at: float = 0.0

    def event(self, actor: str, text: str) -> None:
        elapsed = (trio.current_time() - self.start) * 1000
        print(f"  {elapsed:8.3f} ms  {actor:<12} {text}", file=self.out)


@attrs.frozen
class _Verdict:
    guarantee: str
    passed: bool
    figure: str


async def _engine(commands: Receiver[str], log: _Timeline, done: trio.Event) -> None:
    async for command in commands:
        log.event("engine", f"handles {command!r}")
    log.ended_at = trio.current_time()
    log.event("engine", "ChannelClosed: every sender is gone, so the engine returns")
    done.set()


async def _connection(commands: Sender[str], log: _Timeline) -> None:
    with commands:
        await commands.send("prompt #1")
        log.event("connection", "daemon answered Superseded: the loop returns, closing its sender")


async def _replay_stray_clone(log: _Timeline) -> list[_Verdict]:
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
            log.event("main", f"holders(): {holder.name!r} at {_short(holder.site)}")
        dropped_at = trio.current_time()
        stray.close()
        await engine_done.wait()
        wake = (log.ended_at - dropped_at) * 1e6
    return [
        _Verdict("a stray clone keeps the engine waiting (the bug, shown)", wedged, "200 ms"),
        _Verdict(
            "holders() names the line that kept it",
            [h.name for h in holders] == ["main's stray clone"],
            ", ".join(_short(h.site) for h in holders),
        ),
        _Verdict(
            "closing the last sender wakes the engine", engine_done.is_set(), f"{wake:.0f} µs"
        ),
    ]


async def _replay_move(log: _Timeline) -> list[_Verdict]:
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
        _Verdict("with move() the engine ends", engine_done.is_set(), f"{took:.2f} ms"),
        _Verdict("the moved-from handle refuses use, naming where", refused, "RuntimeError"),
    ]


async def _replay_drop(log: _Timeline) -> list[_Verdict]:
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
        _Verdict("a dropped sender closes the channel, as in Rust", closed, "1 finalizer"),
        _Verdict(
            "the drop warns with the creation site", len(caught) == 1, f"{len(caught)} warning"
        ),
    ]


def _short(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


async def demo(out: TextIO) -> int:
    """Run the walkthrough, print a timeline and a verdict table; 0 when every row passes."""
    print("tether demo: incident 004 in miniature, on tether.channels\n", file=out)
    verdicts: list[_Verdict] = []
    for title, replay in (
        ("1. main keeps a stray clone of the command sender", _replay_stray_clone),
        ("2. the fix: hand the sender over with move()", _replay_move),
        ("3. a sender dropped without close()", _replay_drop),
    ):
        print(title, file=out)
        verdicts += await replay(_Timeline(out))
        print(file=out)
    print("| guarantee | verdict | measured |\n| --- | --- | --- |", file=out)
    for v in verdicts:
        print(f"| {v.guarantee} | {'PASS' if v.passed else 'FAIL'} | {v.figure} |", file=out)
    print("\nNot built yet (the demo grows with each layer):", file=out)
    for module, what, issue in _NOT_BUILT:
        print(f"  - {module}: {what} ({issue})", file=out)
    return 0 if all(v.passed for v in verdicts) else 1
