"""tether.channels against a model: random interleavings of every handle operation.

Each example is a program of operations run in one trio run (or one ``asyncio.run``: the same state
machine, parked the other loop's way) on a real channel and on a plain model (a list of live strong
handles, a deque, a closed flag). After every step the counts must agree, and every observation (a
value, ``WouldBlock``, ``ChannelClosed``, ``SendError``) must be the one the model predicts: so the
receiver sees ``ChannelClosed`` exactly when the model's strong count is 0 and its buffer is empty,
and no message is lost, duplicated or reordered.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import warnings
from collections import deque

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from loops import LOOPS, run_on
from tether import ChannelClosed, Sender, SendError, WeakSender

_index = st.integers(0, 7)
_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["clone", "close", "del", "downgrade", "move"]), _index),
        st.tuples(st.sampled_from(["upgrade", "del_weak", "use_moved"]), _index),
        st.tuples(st.just("send"), _index),
        st.tuples(st.just("recv"), st.just(0)),
        st.tuples(st.just("recv_many"), st.integers(1, 4)),
        st.tuples(st.just("rx_close"), st.just(0)),
    ),
    max_size=50,
)


class _Program:
    """The channel under test and its model, stepped together."""

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        tx, self.rx = tether.channel(int, capacity, name="model")
        self.strong: list[Sender[int]] = [tx]
        self.weak: list[WeakSender[int]] = []
        self.moved: list[Sender[int]] = []
        self.buffer: deque[int] = deque()
        self.rx_closed = False
        self.values = itertools.count()

    def expect_closed(self) -> bool:
        return not self.buffer and (not self.strong or self.rx_closed)

    async def step(self, op: str, arg: int) -> None:
        strong, rx = self.strong, self.rx
        if op in ("clone", "close", "del", "downgrade", "move") and not strong:
            return
        i = arg % len(strong) if strong else 0
        if op == "clone":
            strong.append(strong[i].clone())
        elif op == "close":
            strong.pop(i).close()
        elif op == "del":
            del strong[i]
        elif op == "downgrade":
            self.weak.append(strong[i].downgrade())
        elif op == "move":
            old = strong[i]
            strong[i] = old.move()
            self.moved.append(old)
        elif op == "upgrade" and self.weak:
            upgraded = self.weak[arg % len(self.weak)].upgrade()
            assert (upgraded is None) == (not strong)
            if upgraded is not None:
                strong.append(upgraded)
        elif op == "del_weak" and self.weak:
            del self.weak[arg % len(self.weak)]
        elif op == "use_moved" and self.moved:
            with pytest.raises(RuntimeError, match="moved"):
                self.moved[arg % len(self.moved)].try_send(0)
        elif op == "send" and strong:
            await self._send(strong[i])
        elif op == "recv":
            await self._recv()
        elif op == "recv_many":
            await self._recv_many(arg)
        elif op == "rx_close":
            rx.close()
            self.rx_closed = True

    async def _send(self, sender: Sender[int]) -> None:
        value = next(self.values)
        if self.rx_closed:
            # No pytest.raises(...) as name here: the bound exception's traceback would form a
            # cycle with this frame and keep the sender alive past a later "del".
            try:
                sender.try_send(value)
            except SendError as exc:
                assert exc.value == value  # noqa: PT017 - see the comment above
            else:
                raise AssertionError("try_send after rx.close() did not raise SendError")
        elif len(self.buffer) >= self.capacity:
            with pytest.raises(trio.WouldBlock):
                sender.try_send(value)
        else:
            if value % 2:
                await sender.send(value)
            else:
                sender.try_send(value)
            self.buffer.append(value)

    async def _recv(self) -> None:
        if self.buffer:
            expected = self.buffer.popleft()
            got = await self.rx.recv() if expected % 2 else self.rx.try_recv()
            assert got == expected
        elif self.expect_closed():
            with pytest.raises(ChannelClosed):
                await self.rx.recv()
        else:
            with pytest.raises(trio.WouldBlock):
                self.rx.try_recv()

    async def _recv_many(self, limit: int) -> None:
        if self.buffer:
            expected = [self.buffer.popleft() for _ in range(min(limit, len(self.buffer)))]
            assert await self.rx.recv_many(limit) == expected
        elif self.expect_closed():
            with pytest.raises(ChannelClosed):
                await self.rx.recv_many(limit)

    def check(self) -> None:
        stats = self.rx.statistics()
        assert stats.strong_count == len(self.strong)
        assert stats.weak_count == len(self.weak)
        assert stats.buffered == len(self.buffer)
        assert stats.receiver_closed == self.rx_closed
        assert len(self.rx.holders()) == len(self.strong)


async def _settle(loop: str) -> None:
    """Let finalizer drops land (through the run's token, or ``call_soon_threadsafe``)."""
    if loop == "trio":
        await trio.testing.wait_all_tasks_blocked()
    else:
        await asyncio.sleep(0)


@pytest.mark.parametrize("loop", LOOPS)
@settings(max_examples=300, deadline=None)
@given(capacity=st.sampled_from([0, 1, 2, 4, math.inf]), ops=_ops)
def test_channel_matches_the_model(loop: str, capacity: float, ops: list[tuple[str, int]]) -> None:
    async def run() -> None:
        program = _Program(capacity)
        for op, arg in ops:
            await program.step(op, arg)
            await _settle(loop)
            program.check()
        for sender in program.strong:
            sender.close()
        await program._recv_many(1_000_000)
        with pytest.raises(ChannelClosed):
            await program.rx.recv()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "del" drops senders on purpose
        run_on(loop, run)
