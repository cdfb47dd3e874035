"""Issue 32: ``Sender.reserve()`` holds room before the value exists (tokio's ``reserve``):
the permit's ``send`` never waits or fails for room, a permit given back or dropped frees the
room for the next in line, and a held permit keeps the channel's end from coming early."""

from __future__ import annotations

import gc

import pytest
import trio
import trio.testing

import tether


async def test_a_permit_holds_the_room_its_value_will_take() -> None:
    tx, rx = tether.channel(int, 1)
    permit = await tx.reserve()
    with pytest.raises(trio.WouldBlock):
        tx.try_send(2)  # the only slot is held
    permit.send(1)
    assert rx.try_recv() == 1
    with pytest.raises(RuntimeError, match="already used"):
        permit.send(3)
    assert rx.statistics().peak_buffer_used == 1
    tx.close()


async def test_reserve_waits_in_line_with_senders_while_full() -> None:
    tx, rx = tether.channel(int, 1)
    tx.try_send(0)
    order: list[str] = []

    async def reserver() -> None:
        permit = await tx.reserve()
        order.append("reserved")
        permit.send(1)

    async def sender() -> None:
        await tx.send(2)
        order.append("sent")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reserver)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        assert [await rx.recv() for _ in range(3)] == [0, 1, 2]
    assert order == ["reserved", "sent"]
    tx.close()


async def test_a_permit_given_back_lets_a_parked_sender_in() -> None:
    tx, rx = tether.channel(int, 1)
    permit = await tx.reserve()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tx.send, 5)
        await trio.testing.wait_all_tasks_blocked()
        assert tx.statistics().tasks_waiting_send == 1
        permit.close()
    assert rx.try_recv() == 5
    tx.close()


async def test_a_dropped_permit_gives_its_room_back() -> None:
    tx, rx = tether.channel(int, 1)
    permit = await tx.reserve()
    del permit
    gc.collect()
    await trio.testing.wait_all_tasks_blocked()  # the finalizer's release runs in the run
    tx.try_send(1)
    assert rx.try_recv() == 1
    tx.close()


async def test_a_held_permit_keeps_the_end_from_coming_early() -> None:
    tx, rx = tether.channel(str, 2)
    permit = await tx.reserve()
    tx.close(reason="producer done")
    got: list[str] = []

    async def consume() -> None:
        async for item in rx:
            got.append(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # still waiting: the permit's value may come
        permit.send("last")
    assert got == ["last"]
    with pytest.raises(tether.ChannelClosed, match="producer done"):
        rx.try_recv()


async def test_an_unused_permit_after_the_last_sender_ends_the_channel() -> None:
    tx, rx = tether.channel(int, 2)
    permit = await tx.reserve()
    tx.close()
    async with trio.open_nursery() as nursery:

        async def consume() -> None:
            with pytest.raises(trio.EndOfChannel):
                await rx.recv()

        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        permit.close()


async def test_reserve_refuses_what_cannot_hold() -> None:
    tx, rx = tether.channel(int, 0)
    with pytest.raises(ValueError, match="capacity 0"):
        await tx.reserve()
    tx2, rx2 = tether.channel(int, 1)
    rx2.close(reason="gone")
    with pytest.raises(tether.SendError) as refused:
        await tx2.reserve()
    assert refused.value.value is None
    assert refused.value.reason == "gone"
    for handle in (tx, rx, tx2):
        handle.close()


async def test_a_cancelled_reserve_holds_nothing() -> None:
    tx, rx = tether.channel(int, 1)
    tx.try_send(0)
    with trio.move_on_after(0.01):
        await tx.reserve()
    assert rx.try_recv() == 0
    tx.try_send(1)  # the slot is free again
    assert rx.statistics().tasks_waiting_send == 0
    tx.close()


async def test_a_permit_checks_the_type_and_stays_held() -> None:
    tx, rx = tether.channel(int, 1)
    permit = await tx.reserve()
    with pytest.raises(TypeError):
        permit.send("x")  # type: ignore[arg-type]
    permit.send(1)
    assert rx.try_recv() == 1
    tx.close()
