"""tether.channels: oneshot. Tokio's oneshot tests, ported by name, then tether's own."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import tether
from tether import ChannelClosed, SendError


async def test_send_recv() -> None:
    tx, rx = tether.oneshot(int)
    tx.send(1)
    assert await rx == 1


async def test_close_tx() -> None:
    """tokio close_tx: the sender dropped unsent wakes the waiting receiver with an error."""
    tx, rx = tether.oneshot(int, name="reply")
    async with trio.open_nursery() as nursery:
        errors: list[str] = []

        async def waiter() -> None:
            try:
                await rx
            except ChannelClosed as exc:
                errors.append(str(exc))

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        tx.close()
    assert errors == ["oneshot 'reply': the sender was dropped unsent"]


async def test_close_rx() -> None:
    """tokio close_rx: with the receiver gone, send returns the value."""
    tx, rx = tether.oneshot(str)
    rx.close()
    assert tx.is_closed()
    with pytest.raises(SendError) as caught:
        tx.send("lost")
    assert caught.value.value == "lost"
    tx.close()


async def test_async_rx_closed() -> None:
    """tokio async_rx_closed: ``closed()`` returns once the receiver is dropped."""
    tx, rx = tether.oneshot(int)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tx.closed)
        await trio.testing.wait_all_tasks_blocked()
        del rx
    assert tx.is_closed()
    tx.close()


async def test_send_is_once_only() -> None:
    tx, rx = tether.oneshot(int)
    tx.send(1)
    with pytest.raises(RuntimeError, match="already sent"):
        tx.send(2)
    assert rx.try_recv() == 1
    with pytest.raises(RuntimeError, match="already received"):
        await rx


async def test_value_sent_before_receiver_close_stays_receivable() -> None:
    tx, rx = tether.oneshot(int)
    tx.send(5)
    rx.close()
    assert await rx.recv() == 5


async def test_try_recv_states() -> None:
    tx, rx = tether.oneshot(int)
    with pytest.raises(trio.WouldBlock):
        rx.try_recv()
    tx.close()
    with pytest.raises(ChannelClosed):
        rx.try_recv()


async def test_wrong_type_is_refused_and_the_sender_stays_usable() -> None:
    tx, rx = tether.oneshot(int)
    with pytest.raises(TypeError, match="carries int"):
        tx.send("x")  # type: ignore[arg-type]
    tx.send(3)
    assert await rx == 3


async def test_dropped_unsent_sender_warns_and_closes() -> None:
    tx, rx = tether.oneshot(int)
    assert len(rx.holders()) == 1
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del tx
    with trio.fail_after(5), pytest.raises(ChannelClosed):
        await rx


async def test_one_waiter_at_a_time() -> None:
    tx, rx = tether.oneshot(int)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rx.recv)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="already awaiting"):
            await rx
        tx.send(1)


async def test_cancelled_wait_leaves_the_value_receivable() -> None:
    tx, rx = tether.oneshot(int)
    with trio.move_on_after(0.01):
        await rx
    tx.send(9)
    assert await rx == 9
