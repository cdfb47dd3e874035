"""Issue 32: tether's channels are trio channels to trio code. ``Sender`` and ``Receiver`` are
``trio.abc.SendChannel``/``ReceiveChannel``; their errors are the ones trio code catches; a
close carries its reason; receivers clone for fan-out; statistics have trio's names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio
import trio.testing

import tether
from tether.channels import ChannelEnded, ReceiverClosed


async def drain(channel: trio.abc.ReceiveChannel[int]) -> list[int]:
    """Code written for trio: it knows only trio's interface and trio's errors."""
    out = []
    while True:
        try:
            out.append(await channel.receive())
        except trio.EndOfChannel:
            return out


async def produce(channel: trio.abc.SendChannel[int], n: int) -> None:
    async with channel:
        for i in range(n):
            await channel.send(i)


async def test_trio_code_takes_tether_channels() -> None:
    tx, rx = tether.channel(int, 2, name="numbers")
    assert isinstance(tx, trio.abc.SendChannel)
    assert isinstance(rx, trio.abc.ReceiveChannel)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce, tx.move(), 5)
        assert await drain(rx) == [0, 1, 2, 3, 4]
    rx.close()


async def test_the_errors_are_the_ones_trio_code_catches() -> None:
    tx, rx = tether.channel(int, 1)
    tx.close()
    with pytest.raises(trio.EndOfChannel) as ended:
        await rx.receive()
    assert isinstance(ended.value, tether.ChannelClosed)
    assert isinstance(ended.value, ChannelEnded)
    tx2, rx2 = tether.channel(int, 1)
    rx2.close()
    with pytest.raises(trio.BrokenResourceError) as broken:
        await tx2.send(7)
    assert isinstance(broken.value, tether.SendError)
    assert broken.value.value == 7
    with pytest.raises(trio.ClosedResourceError) as closed:
        await rx2.receive()
    assert isinstance(closed.value, ReceiverClosed)
    tx2.close()
    with pytest.raises(trio.ClosedResourceError):
        await tx2.send(1)
    with pytest.raises(trio.ClosedResourceError):
        tx2.send_nowait(1)


async def test_a_close_carries_its_reason_to_the_other_side() -> None:
    tx, rx = tether.channel(str, 1, name="commands")
    tx.close(reason="superseded by epoch 8")
    with pytest.raises(tether.ChannelClosed) as error:
        await rx.recv()
    assert error.value.reason == "superseded by epoch 8"
    assert "superseded by epoch 8" in str(error.value)
    tx2, rx2 = tether.channel(str, 0)
    rx2.close(reason="the engine stalled")
    with pytest.raises(tether.SendError) as refused:
        await tx2.send("prompt")
    assert refused.value.reason == "the engine stalled"
    assert refused.value.value == "prompt"
    tx2.close()
    one_tx, one_rx = tether.oneshot(int)
    one_tx.close(reason="owner lost")
    with pytest.raises(tether.ChannelClosed, match="owner lost") as unsent:
        await one_rx
    assert isinstance(unsent.value, trio.EndOfChannel)


async def test_an_unexplained_close_has_no_reason() -> None:
    tx, rx = tether.channel(int, 1)
    tx.close()
    with pytest.raises(tether.ChannelClosed) as error:
        rx.try_recv()
    assert error.value.reason is None


async def test_cloned_receivers_share_the_items_and_close_with_the_last() -> None:
    tx, rx = tether.channel(int, 0, name="jobs")
    workers = [rx, rx.clone(), rx.clone()]
    assert rx.statistics().open_receive_channels == 3
    got: list[list[int]] = [[], [], []]

    async def work(index: int, receiver: tether.Receiver[int]) -> None:
        async with receiver:
            async for item in receiver:
                got[index].append(item)
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for index, receiver in enumerate(workers):
            nursery.start_soon(work, index, receiver)
        async with tx:
            for i in range(30):
                await tx.send(i)
    assert sorted(i for part in got for i in part) == list(range(30))
    assert all(part for part in got)  # each worker took some


async def test_closing_one_clone_leaves_the_others_receiving() -> None:
    tx, rx = tether.channel(int, 4)
    other = rx.clone()
    rx.close()
    tx.try_send(1)  # the channel is still open: another receiver remains
    with pytest.raises(trio.ClosedResourceError):
        rx.try_recv()
    with pytest.raises(trio.ClosedResourceError):
        rx.clone()
    assert other.try_recv() == 1
    other.close()
    with pytest.raises(tether.SendError):
        tx.try_send(2)
    tx.close()


async def test_statistics_have_trio_s_names() -> None:
    tx, rx = tether.channel(int, 3)
    mine, theirs = trio.open_memory_channel[int](3)
    for channel in (tx, mine):
        channel.send_nowait(1)
        channel.send_nowait(2)
    theirs_rx = theirs.clone()
    clone = rx.clone()
    await rx.receive()
    await theirs.receive()
    names = ("current_buffer_used", "max_buffer_size", "open_send_channels",
             "open_receive_channels", "tasks_waiting_send", "tasks_waiting_receive",
             "peak_buffer_used")  # fmt: skip
    ours, trios = tx.statistics(), mine.statistics()
    for name in names:
        if hasattr(trios, name):
            assert getattr(ours, name) == getattr(trios, name), name
    for handle in (tx, rx, clone, mine, theirs, theirs_rx):
        handle.close()


async def test_a_superseded_harness_s_engine_learns_why_its_commands_ended(
    tmp_path: Path,
) -> None:
    """The connection loop closes the engine's channel with the reason (issue 32)."""
    from tether import wire
    from tether.harness._inbox import Inbox
    from tether.harness._loop import Ending, connection_loop
    from tether.journal import Transcript
    from tether.testing import FakeAgentd

    tmp_path.chmod(0o700)
    async with (
        FakeAgentd.serving(tmp_path / "a.sock", answer="superseded", current=9) as daemon,
        await Transcript.open(tmp_path / "s.jsonl") as transcript,
    ):
        tx, rx = tether.channel(wire.Prompt | wire.Nudge, math.inf, name="commands")
        result = await connection_loop(
            tx.move(), inbox=Inbox(transcript), session="s", epoch=4, agentd=str(daemon.path),
            reconnect_for=5.0,
        )  # fmt: skip
        assert result.ending is Ending.SUPERSEDED
        with pytest.raises(tether.ChannelClosed) as ended:
            await rx.recv()
        assert ended.value.reason == "superseded by epoch 9"
