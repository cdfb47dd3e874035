"""tether's channels on both loops, with the same assertions (issue 45): the last sender's close
or drop ends the receiver, ``holders()`` names the task and line of each clone, ``reserve``,
``broadcast``'s ``Lagged``, ``oneshot`` and ``watch``, and what a cancelled wait leaves. Then
what only asyncio can do to a parked task: wake it and cancel it before it runs."""

from __future__ import annotations

import asyncio
import gc
import math
import warnings

import anyio
import pytest
import trio

import tether
from helpers import wait_until
from loops import both_loops
from tether import ChannelClosed, SendError


def _line_of(text: str) -> int:
    with open(__file__) as source:
        lines = enumerate(source, 1)
        return next(n for n, line in lines if text in line and "_line_of" not in line)


@both_loops
async def test_the_last_sender_closed_ends_a_parked_receiver_with_its_reason() -> None:
    tx, rx = tether.channel(int, name="cmd")
    clone = tx.clone()
    ended: list[ChannelClosed] = []

    async def receive() -> None:
        try:
            await rx.recv()
        except ChannelClosed as exc:
            ended.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(receive)
        await wait_until(lambda: rx.statistics().tasks_waiting_recv == 1)
        tx.close()
        assert not ended, "one clone still holds the channel open"
        clone.close(reason="superseded by epoch 8")
    assert [exc.reason for exc in ended] == ["superseded by epoch 8"]
    assert isinstance(ended[0], (trio.EndOfChannel, anyio.EndOfStream))


@both_loops
async def test_a_dropped_last_sender_ends_the_receiver_through_its_finalizer() -> None:
    tx, rx = tether.channel(int, name="cmd")
    ended: list[str] = []

    async def receive() -> None:
        async for _ in rx:
            pass
        ended.append("ended")

    async with anyio.create_task_group() as group:
        group.start_soon(receive)
        await wait_until(lambda: rx.statistics().tasks_waiting_recv == 1)
        with pytest.warns(ResourceWarning, match="dropped without close"):
            del tx
    assert ended == ["ended"]


@both_loops
async def test_holders_name_the_task_and_the_line_of_each_clone() -> None:
    tx, rx = tether.channel(int, name="cmd")
    strays: list[tether.Sender[int]] = []

    async def connection_loop() -> None:
        strays.append(tx.clone(name="conn"))

    async with anyio.create_task_group() as group:
        group.start_soon(connection_loop, name="connection-loop")
    tx.close()
    (holder,) = rx.holders()
    assert holder.name == "conn"
    assert holder.site == f"{__file__}:{_line_of('strays.append(tx.clone(')}"
    assert holder.task == "connection-loop"
    with anyio.move_on_after(0.05) as scope:
        await rx.recv()
    assert scope.cancelled_caught, "the stray clone keeps the channel open"
    strays.pop().close()
    with pytest.raises(ChannelClosed):
        await rx.recv()


@pytest.mark.parametrize("capacity", [0, 1, 64, math.inf])
@both_loops
async def test_every_value_arrives_once_in_each_senders_order(capacity: float) -> None:
    tx, rx = tether.channel(tuple, capacity)

    async def produce(sender: tether.Sender[tuple[int, int]], who: int) -> None:
        with sender:
            for i in range(200):
                await sender.send((who, i))

    got: list[tuple[int, int]] = []
    async with anyio.create_task_group() as group:
        for who in range(3):
            group.start_soon(produce, tx.clone(), who)
        tx.close()
        async for item in rx:
            got.append(item)
    assert sorted(got) == [(who, i) for who in range(3) for i in range(200)]
    for who in range(3):
        assert [i for w, i in got if w == who] == list(range(200))


@both_loops
async def test_recv_many_takes_what_is_buffered_and_waits_for_one() -> None:
    tx, rx = tether.channel(int, 8)
    for i in range(5):
        tx.try_send(i)
    assert await rx.recv_many(3) == [0, 1, 2]
    assert await rx.recv_many(10) == [3, 4]
    async with anyio.create_task_group() as group:
        group.start_soon(tx.send, 9)
        assert await rx.recv_many(10) == [9]
    tx.close()


@both_loops
async def test_try_send_and_try_recv_raise_the_would_block_of_trio_and_of_anyio() -> None:
    tx, rx = tether.channel(int, 1)
    with pytest.raises(anyio.WouldBlock):
        rx.try_recv()
    tx.try_send(1)
    with pytest.raises(trio.WouldBlock):
        tx.try_send(2)
    assert rx.try_recv() == 1
    tx.close()


@both_loops
async def test_a_reserve_waits_for_room_and_a_dropped_permit_gives_it_back() -> None:
    tx, rx = tether.channel(int, 1)
    permit = await tx.reserve()
    granted: list[tether.Permit[int]] = []

    async def second() -> None:
        granted.append(await tx.reserve())

    async with anyio.create_task_group() as group:
        group.start_soon(second)
        await wait_until(lambda: rx.statistics().tasks_waiting_send == 1)
        permit.close()
    granted.pop().send(7)
    assert await rx.recv() == 7
    tx.close()


@both_loops
async def test_closing_the_receiver_hands_parked_senders_their_values() -> None:
    tx, rx = tether.channel(int, 0)
    errors: list[SendError[int]] = []

    async def send() -> None:
        try:
            await tx.send(41)
        except SendError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await wait_until(lambda: rx.statistics().tasks_waiting_send == 1)
        rx.close(reason="shutting down")
    assert [(e.value, e.reason) for e in errors] == [(41, "shutting down")]
    assert isinstance(errors[0], anyio.BrokenResourceError)
    tx.close()


@both_loops
async def test_a_cancelled_recv_takes_nothing_and_a_cancelled_send_sends_nothing() -> None:
    tx, rx = tether.channel(int, 0)
    with anyio.move_on_after(0.01):
        await rx.recv()
    with anyio.move_on_after(0.01):
        await tx.send(1)
    stats = rx.statistics()
    assert (stats.tasks_waiting_recv, stats.tasks_waiting_send, stats.buffered) == (0, 0, 0)
    async with anyio.create_task_group() as group:
        group.start_soon(tx.send, 2)
        assert await rx.recv() == 2
    tx.close()


@both_loops
async def test_broadcast_tells_a_lagging_subscriber_how_much_it_missed() -> None:
    tx, first = tether.broadcast(int, 2)
    second = first.resubscribe()
    for i in range(5):
        tx.send(i)
    with pytest.raises(tether.Lagged) as lagged:
        await first.recv()
    assert lagged.value.missed == 3
    assert [await first.recv(), await first.recv()] == [3, 4]
    tx.close()
    with pytest.raises(tether.Lagged):
        await second.recv()
    assert [i async for i in second] == [3, 4]


@both_loops
async def test_a_oneshot_dropped_unsent_wakes_its_receiver() -> None:
    tx, rx = tether.oneshot(int, name="reply")
    ended: list[str] = []

    async def wait() -> None:
        try:
            await rx
        except ChannelClosed as exc:
            ended.append(str(exc))

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await wait_until(lambda: bool(rx._state.recv_tasks))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del tx
            gc.collect()
    assert len(ended) == 1
    assert "dropped unsent" in ended[0]


@both_loops
async def test_watch_receivers_see_the_last_value_then_the_end() -> None:
    tx, rx = tether.watch("starting", name="state")
    seen: list[str] = []

    async def observe() -> None:
        while True:
            try:
                await rx.changed()
            except ChannelClosed:
                return
            seen.append(rx.borrow())

    async with anyio.create_task_group() as group:
        group.start_soon(observe)
        await wait_until(lambda: bool(rx._state.changed_waiters))
        tx.send("ready")
        await wait_until(lambda: seen == ["ready"])
        tx.close()
    assert seen == ["ready"]


def test_under_asyncio_a_woken_receiver_cancelled_before_it_ran_keeps_the_value() -> None:
    """trio never cancels a task it has rescheduled; asyncio can (``task.cancel()`` between
    the wake and the task's turn). The value taken from the sender is the receiver's, and the
    same cancellation, counted once, comes at its next await."""

    async def main() -> None:
        tx, rx = tether.channel(int, 0)
        got: list[int] = []
        counts: list[int] = []

        async def receive() -> None:
            got.append(await rx.recv())
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                counts.append(task.cancelling())
                raise

        task = asyncio.create_task(receive())
        await wait_until(lambda: rx.statistics().tasks_waiting_recv == 1)
        tx.try_send(5)  # the receiver is woken with 5, and has not run yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert got == [5]
        assert counts == [1]
        tx.close()

    asyncio.run(main())


def test_under_asyncio_a_sender_cancelled_after_its_value_went_in_has_sent_it() -> None:
    async def main() -> None:
        tx, rx = tether.channel(int, 1)
        tx.try_send(1)
        sent: list[int] = []

        async def send() -> None:
            await tx.send(2)
            sent.append(2)

        task = asyncio.create_task(send())
        await wait_until(lambda: rx.statistics().tasks_waiting_send == 1)
        assert rx.try_recv() == 1  # admits the parked sender's value
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sent == [2], "send returned: the value went in"
        assert rx.try_recv() == 2
        tx.close()

    asyncio.run(main())
