"""Incident 004 in miniature, on channels alone: a stray sender clone keeps the engine alive.

The harness's connection loop returns after a Superseded rejection, but ``main`` still holds a
clone of the command sender, so the engine's ``recv()`` loop never sees the channel close.
``holders()`` names ``main``'s line; with ``move()`` there is no clone and the engine ends.
"""

from __future__ import annotations

import trio
import trio.testing

import tether
from tether import Receiver, Sender


async def _engine(commands: Receiver[str], handled: list[str], done: trio.Event) -> None:
    async for command in commands:
        handled.append(command)
    done.set()


async def _connection(commands: Sender[str]) -> None:
    with commands:
        await commands.send("prompt")
    # Superseded: the loop returns and its sender is closed.


async def test_incident_004_stray_clone_keeps_the_engine_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tx, rx = tether.channel(str, name="commands")
    done = trio.Event()
    handled: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_engine, rx, handled, done)
        stray = tx.clone(name="main")  # the bug: main keeps a clone
        nursery.start_soon(_connection, tx)
        with trio.move_on_after(3600):  # an hour of virtual time
            await done.wait()
        assert handled == ["prompt"]
        assert not done.is_set(), "the engine ended although main still holds a sender"
        holders = rx.holders()
        assert [h.name for h in holders] == ["main"]
        assert holders[0].site.endswith(f"test_incident_004.py:{_line('stray = tx.clone')}")
        stray.close()
        with trio.fail_after(1):
            await done.wait()


async def test_incident_004_move_ends_the_engine_when_the_connection_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tx, rx = tether.channel(str, name="commands")
    done = trio.Event()
    handled: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_engine, rx, handled, done)
        nursery.start_soon(_connection, tx.move())
        started = trio.current_time()
        await done.wait()
        assert trio.current_time() == started, "the engine waited for virtual time to pass"
    assert handled == ["prompt"]
    assert rx.holders() == ()


def _line(text: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, line in enumerate(f, 1) if text in line and "_line(" not in line)
