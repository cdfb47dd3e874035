"""tether.channels: watch. Tokio's watch tests, ported by name, then tether's own."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import tether
from tether import ChannelClosed, SendError


async def test_single_rx_recv() -> None:
    tx, rx = tether.watch("one")
    assert rx.borrow() == "one"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rx.changed)
        await trio.testing.wait_all_tasks_blocked()
        tx.send("two")
    assert rx.borrow() == "two"
    tx.close()
    with pytest.raises(ChannelClosed):
        await rx.changed()
    assert rx.borrow() == "two"


async def test_rx_observes_final_value() -> None:
    tx, rx = tether.watch(0)
    tx.send(1)
    tx.close()
    assert rx.has_changed()
    await rx.changed()
    assert rx.borrow() == 1
    with pytest.raises(ChannelClosed):
        rx.has_changed()
    with pytest.raises(ChannelClosed):
        await rx.changed()


async def test_receiver_is_notified_when_last_sender_is_dropped() -> None:
    tx1, rx = tether.watch(0, name="state")
    tx2 = tx1.clone()
    results: list[str] = []

    async def waiter() -> None:
        try:
            await rx.changed()
            results.append("changed")
        except ChannelClosed:
            results.append("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        tx1.close()
        await trio.testing.wait_all_tasks_blocked()
        assert results == [], "dropping one of two senders woke the receiver"
        with pytest.warns(ResourceWarning):
            del tx2
    assert results == ["closed"]


async def test_send_without_receivers_fails_and_keeps_the_old_value() -> None:
    tx, rx = tether.watch(1)
    rx.close()
    with pytest.raises(SendError) as caught:
        tx.send(2)
    assert caught.value.value == 2
    assert tx.borrow() == 1
    tx.close()


async def test_closed_returns_when_the_last_receiver_goes() -> None:
    tx, rx = tether.watch(0)
    rx2 = tx.subscribe()
    assert tx.receiver_count == 2
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tx.closed)
        await trio.testing.wait_all_tasks_blocked()
        rx.close()
        await trio.testing.wait_all_tasks_blocked()
        assert not tx.is_closed()
        del rx2
    assert tx.is_closed()
    tx.close()


async def test_every_receiver_sees_the_latest_value_once() -> None:
    tx, rx = tether.watch(0)
    rx2 = rx.clone()
    for v in (1, 2, 3):
        tx.send(v)
    await rx.changed()
    assert rx.borrow() == 3
    assert not rx.has_changed()
    assert rx2.borrow_and_update() == 3
    assert not rx2.has_changed()
    subscribed = tx.subscribe()
    assert not subscribed.has_changed()
    tx.close()


async def test_closed_receiver_refuses_use() -> None:
    tx, rx = tether.watch(0)
    rx.close()
    with pytest.raises(trio.ClosedResourceError):
        await rx.changed()
    with pytest.raises(trio.ClosedResourceError):
        rx.clone()
    tx.close()


async def test_holders_name_every_live_sender() -> None:
    tx, rx = tether.watch(0, name="state")
    with tx.clone(name="mirror"):
        assert [h.name for h in rx.holders()] == ["state", "mirror"]
    tx.close()
    assert rx.holders() == ()
