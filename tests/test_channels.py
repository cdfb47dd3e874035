"""tether.channels: the mpsc channel. Tokio's mpsc tests, ported by name, then tether's own."""

from __future__ import annotations

import gc
import math
import threading
import weakref
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import tether
from tether import ChannelClosed, Receiver, Sender, SendError


class Item:
    """An item we can hold a weak reference to."""

    def __init__(self, n: int) -> None:
        self.n = n


# --- tokio/tests/sync_mpsc.rs, by name ------------------------------------------------------


async def test_send_recv_with_buffer() -> None:
    tx, rx = tether.channel(int, 16)
    await tx.send(1)
    await tx.send(2)
    tx.close()
    assert await rx.recv() == 1
    assert await rx.recv() == 2
    with pytest.raises(ChannelClosed):
        await rx.recv()


async def test_tx_close_gets_none() -> None:
    tx, rx = tether.channel(int, 10)
    tx.close()
    with pytest.raises(ChannelClosed):
        await rx.recv()


async def test_recv_close_gets_none_idle() -> None:
    tx, rx = tether.channel(int, 10)
    rx.close()
    with pytest.raises(ChannelClosed):
        await rx.recv()
    with pytest.raises(SendError):
        await tx.send(1)
    tx.close()


async def test_dropping_rx_closes_channel() -> None:
    tx, rx = tether.channel(Item, 100)
    item = Item(1)
    await tx.send(item)
    watched = weakref.ref(item)
    del item, rx
    with trio.fail_after(5):
        await tx.closed()
    assert tx.is_closed()
    assert watched() is None, "the buffered item was not released with the receiver"
    with pytest.raises(SendError):
        await tx.send(Item(2))
    tx.close()


async def test_unconsumed_messages_are_dropped() -> None:
    tx, rx = tether.channel(Item, 100)
    items = [Item(i) for i in range(3)]
    refs = [weakref.ref(i) for i in items]
    for i in items:
        tx.try_send(i)
    del items, i, rx
    await trio.testing.wait_all_tasks_blocked()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    tx.close()


async def test_try_send_fail() -> None:
    tx, rx = tether.channel(str, 1)
    tx.try_send("hello")
    with pytest.raises(trio.WouldBlock):
        tx.try_send("fail")
    assert await rx.recv() == "hello"
    tx.try_send("goodbye")
    tx.close()
    assert await rx.recv() == "goodbye"
    with pytest.raises(ChannelClosed):
        await rx.recv()


async def test_try_recv_close_while_empty() -> None:
    tx, rx = tether.channel(int, 1)
    with pytest.raises(trio.WouldBlock):
        rx.try_recv()
    tx.close()
    with pytest.raises(ChannelClosed):
        rx.try_recv()


async def test_send_after_receiver_close_returns_the_value() -> None:
    tx, rx = tether.channel(Item, 1)
    rx.close()
    item = Item(7)
    with pytest.raises(SendError) as caught:
        await tx.send(item)
    assert caught.value.value is item
    with pytest.raises(SendError) as caught_try:
        tx.try_send(item)
    assert caught_try.value.value is item
    tx.close()


async def test_downgrade_upgrade_sender_success() -> None:
    tx, rx = tether.channel(int, 1)
    weak = tx.downgrade()
    upgraded = weak.upgrade()
    assert upgraded is not None
    await upgraded.send(1)
    assert await rx.recv() == 1
    upgraded.close()
    tx.close()


async def test_downgrade_upgrade_sender_failure() -> None:
    tx, _rx = tether.channel(int, 1)
    weak = tx.downgrade()
    tx.close()
    assert weak.upgrade() is None


async def test_downgrade_drop_upgrade() -> None:
    tx, _rx = tether.channel(int, 1)
    weak = tx.downgrade()
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del tx
    await trio.testing.wait_all_tasks_blocked()
    assert weak.upgrade() is None


async def test_rx_is_closed_when_only_weak_senders_remain() -> None:
    tx, rx = tether.channel(int, 1)
    weak = tx.downgrade()
    tx.close()
    with pytest.raises(ChannelClosed):
        await rx.recv()
    assert weak.strong_count == 0
    assert weak.weak_count == 1


async def test_strong_and_weak_counts_when_cloned() -> None:
    tx, rx = tether.channel(int, 1)
    tx2 = tx.clone()
    weak = tx.downgrade()
    weak2 = weak.upgrade()
    assert weak2 is not None
    weak3 = tx2.downgrade()
    assert (tx.strong_count, tx.weak_count) == (3, 2)
    assert (rx.strong_count, rx.weak_count) == (3, 2)
    del weak3
    assert tx.weak_count == 1
    for sender in (tx, tx2, weak2):
        sender.close()
    assert (weak.strong_count, weak.weak_count) == (0, 1)


async def test_actor_weak_sender_to_itself_still_terminates() -> None:
    """An actor keeps a weak sender to its own mailbox; the mailbox still closes."""
    tx, rx = tether.channel(str, 8, name="mailbox")
    stopped = trio.Event()
    seen: list[str] = []

    async def actor(inbox: Receiver[str], self_ref: tether.WeakSender[str]) -> None:
        async for msg in inbox:
            seen.append(msg)
            if msg == "ping":
                me = self_ref.upgrade()
                assert me is not None
                with me:
                    me.try_send("pong-to-self")
        stopped.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor, rx, tx.downgrade())
        await tx.send("ping")
        await trio.testing.wait_all_tasks_blocked()
        tx.close()
        with trio.fail_after(5):
            await stopped.wait()
    assert seen == ["ping", "pong-to-self"]


# --- tether's own semantics -------------------------------------------------------------------


async def test_buffered_items_stay_receivable_after_receiver_close() -> None:
    tx, rx = tether.channel(int, 4)
    tx.try_send(1)
    tx.try_send(2)
    rx.close()
    with pytest.raises(SendError):
        tx.try_send(3)
    assert [await rx.recv(), rx.try_recv()] == [1, 2]
    with pytest.raises(ChannelClosed, match="closed by its receiver"):
        await rx.recv()
    tx.close()


async def test_receiver_close_hands_parked_senders_their_values_back() -> None:
    tx, rx = tether.channel(int, 0)
    got: list[object] = []

    async def sender() -> None:
        try:
            await tx.send(42)
        except SendError as exc:
            got.append(exc.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert rx.statistics().tasks_waiting_send == 1
        rx.close()
    assert got == [42]
    tx.close()


async def test_closed_returns_when_receiver_closes() -> None:
    tx, rx = tether.channel(int, 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tx.closed)
        await trio.testing.wait_all_tasks_blocked()
        assert not tx.is_closed()
        rx.close()
    assert tx.is_closed()
    await tx.closed()
    tx.close()


async def test_last_sender_close_wakes_a_parked_receiver() -> None:
    tx, rx = tether.channel(int, 0, name="cmd")
    tx2 = tx.clone()
    outcome: list[str] = []

    async def engine() -> None:
        try:
            await rx.recv()
        except ChannelClosed as exc:
            outcome.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine)
        await trio.testing.wait_all_tasks_blocked()
        tx.close()
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == [], "closing one of two senders woke the receiver"
        tx2.close()
    assert outcome == ["every sender of channel 'cmd' is closed"]


async def test_async_for_ends_when_every_sender_is_gone() -> None:
    tx, rx = tether.channel(int, math.inf)
    for i in range(5):
        tx.try_send(i)
    tx.close()
    assert [i async for i in rx] == [0, 1, 2, 3, 4]


async def test_rendezvous_send_waits_for_the_receiver() -> None:
    tx, rx = tether.channel(int)
    sent = trio.Event()

    async def producer() -> None:
        await tx.send(1)
        sent.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()
        assert await rx.recv() == 1
    assert sent.is_set()
    tx.close()


async def test_full_buffer_parks_senders_in_order() -> None:
    tx, rx = tether.channel(int, 1)
    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(tx.send, i)
            await trio.testing.wait_all_tasks_blocked()
        assert rx.statistics().tasks_waiting_send == 3
        assert [await rx.recv() for _ in range(4)] == [0, 1, 2, 3]
    tx.close()


async def test_recv_many_takes_what_is_buffered_up_to_the_limit() -> None:
    tx, rx = tether.channel(int, 8)
    for i in range(5):
        tx.try_send(i)
    assert await rx.recv_many(3) == [0, 1, 2]
    assert await rx.recv_many(256) == [3, 4]
    with pytest.raises(ValueError, match="at least 1"):
        await rx.recv_many(0)
    tx.close()
    with pytest.raises(ChannelClosed):
        await rx.recv_many(4)


async def test_recv_many_waits_for_at_least_one_and_takes_parked_senders() -> None:
    tx, rx = tether.channel(int, 2)
    async with trio.open_nursery() as nursery:
        batches: list[list[int]] = []

        async def consumer() -> None:
            batches.append(await rx.recv_many(10))

        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        assert batches == []
        await tx.send(1)
    assert batches == [[1]]
    async with trio.open_nursery() as nursery:
        for i in range(5):  # 2 buffered, 3 parked
            nursery.start_soon(tx.send, i)
            await trio.testing.wait_all_tasks_blocked()
        assert await rx.recv_many(3) == [0, 1, 2]
        assert rx.statistics().buffered == 2
        assert await rx.recv_many(10) == [3, 4]
    tx.close()


async def test_cancelled_send_delivers_nothing() -> None:
    tx, rx = tether.channel(int, 0)
    with trio.move_on_after(0.01) as scope:
        await tx.send(1)
    assert scope.cancelled_caught
    assert rx.statistics().tasks_waiting_send == 0
    with pytest.raises(trio.WouldBlock):
        rx.try_recv()
    tx.close()


async def test_cancelled_recv_takes_nothing() -> None:
    tx, rx = tether.channel(int, 1)
    with trio.move_on_after(0.01) as scope:
        await rx.recv()
    assert scope.cancelled_caught
    tx.try_send(5)
    assert rx.try_recv() == 5
    tx.close()


async def test_send_and_recv_are_checkpoints() -> None:
    tx, rx = tether.channel(int, 1)
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await tx.send(1)
        with pytest.raises(trio.Cancelled):
            await rx.recv()
    assert rx.statistics().buffered == 0
    tx.close()


async def test_closing_a_handle_fails_its_own_parked_send() -> None:
    tx, rx = tether.channel(int, 0)
    other = tx.clone()
    errors: list[BaseException] = []

    async def blocked_send() -> None:
        try:
            await tx.send(1)
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(blocked_send)
        await trio.testing.wait_all_tasks_blocked()
        tx.close()
    assert len(errors) == 1
    assert rx.strong_count == 1
    with pytest.raises(trio.ClosedResourceError):
        await tx.send(2)
    other.close()


async def test_use_after_close_raises_and_close_is_idempotent() -> None:
    tx, _rx = tether.channel(int, 1)
    tx.close()
    tx.close()
    with pytest.raises(trio.ClosedResourceError):
        tx.try_send(1)
    with pytest.raises(trio.ClosedResourceError):
        tx.clone()


async def test_context_managers_close() -> None:
    tx, rx = tether.channel(int, 1)
    with tx:
        async with tx.clone() as tx2:
            assert rx.strong_count == 2
        assert tx2.strong_count == 1
    assert rx.strong_count == 0
    async with rx:
        pass
    assert rx.statistics().receiver_closed
    await tx.aclose()
    await rx.aclose()


# --- move ------------------------------------------------------------------------------------


async def test_move_kills_the_old_handle_and_says_where() -> None:
    tx, rx = tether.channel(int, 4, name="cmd")
    moved = tx.move()
    line = _line_of("moved = tx.move()")
    assert rx.strong_count == 1
    for use in (lambda: tx.try_send(1), tx.clone, tx.move, tx.downgrade):
        with pytest.raises(RuntimeError, match=rf"moved at .*test_channels.py:{line}"):
            use()
    with pytest.raises(RuntimeError, match="use the handle move"):
        await tx.send(1)
    tx.close()  # a no-op on a moved handle
    assert rx.strong_count == 1
    assert [h.site for h in rx.holders()] == [f"{__file__}:{line}"]
    assert "moved" in repr(tx)
    moved.close()
    with pytest.raises(ChannelClosed):
        await rx.recv()


async def test_move_never_lets_the_count_touch_zero() -> None:
    tx, rx = tether.channel(int, 0)
    woke = trio.Event()

    async def engine() -> None:
        with pytest.raises(ChannelClosed):
            await rx.recv()
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine)
        await trio.testing.wait_all_tasks_blocked()
        moved = tx.move().move().move()
        await trio.testing.wait_all_tasks_blocked()
        assert not woke.is_set()
        moved.close()


# --- holders ---------------------------------------------------------------------------------


async def test_holders_name_site_and_task() -> None:
    tx, rx = tether.channel(int, 1, name="cmd")
    first = _line_of('tx, rx = tether.channel(int, 1, name="cmd")')
    clones: list[Sender[int]] = []

    async def connection() -> None:
        clones.append(tx.clone(name="conn"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection, name="connection-loop")
    holders = rx.holders()
    assert [h.name for h in holders] == ["cmd", "conn"]
    assert holders[0].site == f"{__file__}:{first}"
    assert holders[1].site == f"{__file__}:{_line_of('clones.append(tx.clone(name=')}"
    assert holders[0].task is not None
    assert "test_holders_name_site_and_task" in holders[0].task
    assert holders[1].task == "connection-loop"
    tx.close()
    assert [h.name for h in rx.holders()] == ["conn"]
    clones[0].close()
    assert rx.holders() == ()


def test_holders_outside_a_run_have_no_task() -> None:
    tx, rx = tether.channel(int, 1)
    assert rx.holders()[0].task is None
    tx.close()


# --- finalizer drop --------------------------------------------------------------------------


async def test_dropped_sender_is_closed_and_warns_with_its_site() -> None:
    tx, rx = tether.channel(int, 0, name="dropped")
    line = _line_of('tx, rx = tether.channel(int, 0, name="dropped")')
    with pytest.warns(ResourceWarning, match=rf"'dropped' created at .*test_channels.py:{line}"):
        del tx
    with trio.fail_after(5), pytest.raises(ChannelClosed):
        await rx.recv()


async def test_dropped_sender_in_a_cycle_is_closed_by_the_collector() -> None:
    tx, rx = tether.channel(int, 0)
    holder: dict[str, Any] = {"tx": tx}
    holder["self"] = holder
    del tx
    assert rx.strong_count == 1
    with pytest.warns(ResourceWarning):  # noqa: PT031 - the drop is the del and the collection
        del holder
        gc.collect()
    with trio.fail_after(5), pytest.raises(ChannelClosed):
        await rx.recv()


async def test_sender_dropped_on_another_thread_closes_through_the_trio_token() -> None:
    tx, rx = tether.channel(int, 0)
    box = [tx]
    del tx
    finalized_on: list[int] = []

    def drop_in_thread() -> None:
        finalized_on.append(threading.get_ident())
        box.clear()

    async with trio.open_nursery() as nursery:

        async def engine() -> None:
            with pytest.raises(ChannelClosed):
                await rx.recv()

        nursery.start_soon(engine)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.warns(ResourceWarning):
            await trio.to_thread.run_sync(drop_in_thread)
    assert finalized_on
    assert finalized_on[0] != threading.get_ident()
    assert rx.strong_count == 0


def test_sender_dropped_after_the_run_ended_only_warns() -> None:
    async def make() -> tuple[Sender[int], Receiver[int]]:
        tx, rx = tether.channel(int, 1)
        with trio.move_on_after(0):
            await rx.recv()  # parks, so the channel records this run's token
        return tx, rx

    tx, rx = trio.run(make)
    with pytest.warns(ResourceWarning):  # noqa: PT031 - the drop is the del and the collection
        del tx
        gc.collect()  # the finished run may still hold its result in a cycle
    assert rx.strong_count == 0
    with pytest.raises(ChannelClosed):
        rx.try_recv()


def test_dropped_receiver_closes_for_senders_outside_a_run() -> None:
    tx, rx = tether.channel(int, 1)
    del rx
    assert tx.is_closed()
    tx.close()


# --- element types ---------------------------------------------------------------------------


async def test_send_rejects_a_value_of_the_wrong_type() -> None:
    tx, rx = tether.channel(int, 1)
    with pytest.raises(TypeError, match="carries int, not str"):
        await tx.send("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tx.try_send(None)  # type: ignore[arg-type]
    assert rx.statistics().buffered == 0
    tx.close()


async def test_unions_none_and_generics_are_checked_by_class() -> None:
    tx, _ = tether.channel(int | str, 4)
    tx.try_send(1)
    tx.try_send("a")
    with pytest.raises(TypeError, match=r"int \| str"):
        tx.try_send(1.5)
    tx.close()
    opt, _ = tether.channel(int | None, 4)
    opt.try_send(None)
    opt.close()
    lists, _ = tether.channel(list[int], 4)
    lists.try_send([1])
    with pytest.raises(TypeError):
        lists.try_send((1,))
    lists.close()


async def test_any_and_check_types_false_skip_the_check() -> None:
    anything, _ = tether.channel(Any, 4)
    anything.try_send(object())
    anything.close()
    unchecked, _ = tether.channel(int, 4, check_types=False)
    unchecked.try_send("not an int")  # type: ignore[arg-type]
    unchecked.close()


def test_uncheckable_types_are_refused_at_creation() -> None:
    from typing import Literal, Protocol

    class NotRuntime(Protocol):
        def f(self) -> None: ...

    for bad in (Literal["a"], NotRuntime):
        with pytest.raises(TypeError, match="check_types=False"):
            tether.channel(bad)
    tx, _ = tether.channel(NotRuntime, check_types=False)
    tx.close()


def test_capacity_is_validated_as_trio_does() -> None:
    """Issue 32: a non-integer (even ``1.0``) is a TypeError, a negative a ValueError, as for
    ``trio.open_memory_channel``."""
    for bad in (1.5, 1.0, math.nan, "1"):
        with pytest.raises(TypeError, match="capacity"):
            tether.channel(int, bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            trio.open_memory_channel[int](bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity"):
        tether.channel(int, -1)
    tx, _ = tether.channel(int, math.inf)
    tx.close()


# --- introspection and construction ----------------------------------------------------------


async def test_statistics_reports_every_field() -> None:
    tx, rx = tether.channel(int, 4, name="stats")
    weak = tx.downgrade()
    tx.try_send(1)
    stats = rx.statistics()
    assert attrs.asdict(stats) == {
        "name": "stats",
        "capacity": 4,
        "buffered": 1,
        "strong_count": 1,
        "weak_count": 1,
        "receiver_closed": False,
        "tasks_waiting_send": 0,
        "tasks_waiting_recv": 0,
        "receivers": 1,
        "peak_buffer_used": 1,
    }
    assert tx.statistics() == stats
    del weak
    tx.close()


async def test_repr_shows_the_counts() -> None:
    tx, rx = tether.channel(int, 4, name="cmd")
    tx.try_send(1)
    assert repr(rx) == "<tether.Receiver 'cmd' strong=1 weak=0 buffered=1/4>"
    assert repr(tx) == "<tether.Sender 'cmd' open strong=1>"
    tx.close()
    assert repr(tx) == "<tether.Sender 'cmd' closed strong=0>"


def test_endpoints_have_no_public_constructor() -> None:
    for cls in (tether.Sender, tether.Receiver, tether.WeakSender):
        with pytest.raises(TypeError, match="no public constructor"):
            cls()


def _line_of(text: str) -> int:
    """The line of this file holding ``text`` (so tests do not hard-code line numbers)."""
    with open(__file__, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if text in line and "_line_of(" not in line:
                return number
    raise AssertionError(f"{text!r} is not in {__file__}")


async def test_unnamed_channels_read_well_in_messages_and_reprs() -> None:
    tx, rx = tether.channel(int, 1)
    assert repr(rx) == "<tether.Receiver strong=1 weak=0 buffered=0/1>"
    tx.close()
    with pytest.raises(ChannelClosed, match=r"^every sender of an unnamed channel is closed$"):
        await rx.recv()
