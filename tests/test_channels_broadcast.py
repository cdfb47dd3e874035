"""Issue 32: ``broadcast(T, capacity)``: every subscriber receives every value sent after it
subscribed; a sender never waits; a subscriber that fell behind learns how many values it
missed (``Lagged``) and goes on; the last sender closed ends every subscriber's loop."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import tether


async def test_every_subscriber_receives_every_value() -> None:
    tx, first = tether.broadcast(int, 8, name="events")
    second = tx.subscribe()
    got: dict[str, list[int]] = {"first": [], "second": []}

    async def listen(name: str, rx: tether.BroadcastReceiver[int]) -> None:
        with rx:
            async for value in rx:
                got[name].append(value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen, "first", first)
        nursery.start_soon(listen, "second", second)
        await trio.testing.wait_all_tasks_blocked()
        with tx:
            for i in range(5):
                assert tx.send(i) == 2
                await trio.testing.wait_all_tasks_blocked()
    assert got == {"first": [0, 1, 2, 3, 4], "second": [0, 1, 2, 3, 4]}


async def test_a_slow_subscriber_learns_how_many_it_missed_then_goes_on() -> None:
    tx, rx = tether.broadcast(int, 3)
    for i in range(10):
        tx.send(i)  # never waits, however far behind rx is
    with pytest.raises(tether.Lagged) as lagged:
        await rx.recv()
    assert lagged.value.missed == 7
    assert [await rx.recv() for _ in range(3)] == [7, 8, 9]
    tx.close(reason="stream over")
    with pytest.raises(trio.EndOfChannel, match="stream over"):
        await rx.recv()


async def test_a_late_subscriber_sees_only_what_comes_after() -> None:
    tx, early = tether.broadcast(str, 4)
    tx.send("before")
    late = tx.subscribe()
    tx.send("after")
    tx.close()
    assert [v async for v in early] == ["before", "after"]
    assert [v async for v in late] == ["after"]


async def test_sending_with_no_subscriber_left_fails_with_the_value() -> None:
    tx, rx = tether.broadcast(int, 2)
    rx.close()
    with pytest.raises(tether.SendError) as refused:
        tx.send(1)
    assert refused.value.value == 1
    with pytest.raises(TypeError):
        tx.send("x")  # type: ignore[arg-type]
    tx.close()
    with pytest.raises(trio.ClosedResourceError):
        tx.send(2)
    with pytest.raises(trio.ClosedResourceError):
        await rx.recv()


@pytest.mark.no_deadlock_check  # this test's own detector does it, with a short cushion
def test_a_subscriber_parked_on_a_broadcast_is_in_the_deadlock_report() -> None:
    from tether.testing import Deadlock, DeadlockDetector
    from tether.testing._engage import watching_runs

    async def main() -> None:
        tx, rx = tether.broadcast(int, 2, name="ticks")
        forgotten = tx.clone()  # keeps it open, held by this task only
        tx.close()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rx.recv, name="listener")
        finally:
            forgotten.close()
            rx.close()

    with watching_runs(lambda: DeadlockDetector(0.1, 30.0)), pytest.raises(Deadlock) as found:
        trio.run(main)
    assert "on broadcast 'ticks': held by" in str(found.value)


def test_capacity_is_checked() -> None:
    with pytest.raises(ValueError, match="capacity"):
        tether.broadcast(int, 0)
    with pytest.raises(TypeError, match="capacity"):
        tether.broadcast(int, 1.5)  # type: ignore[arg-type]
