"""The hand-offs under the journal and the stores: ``Worker`` (a call on its thread, answered
inline when the run is idle or through trio when it is not) and ``GroupCommit`` (what queues
while a commit is in flight goes in the next one, failures stay in their group)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from tether._batch import GroupCommit
from tether._worker import Worker


async def test_a_worker_answers_fast_slow_failing_and_concurrent_calls_in_order() -> None:
    worker = Worker("test", inline_wait=0.002)
    threads: list[str] = []

    def job(value: int, pause: float = 0.0) -> int:
        threads.append(threading.current_thread().name)
        time.sleep(pause)
        return value

    try:
        assert await worker.run(job, 1) == 1  # idle: answered inline
        assert await worker.run(job, 2, 0.05) == 2  # past the inline wait: answered by trio
        with pytest.raises(ZeroDivisionError):
            await worker.run(lambda: 1 / 0)
        results: list[int] = []

        async def call(value: int) -> None:
            results.append(await worker.run(job, value, 0.001))

        async with trio.open_nursery() as nursery:  # never idle: every answer through trio
            for value in range(20):
                nursery.start_soon(call, value)
        assert sorted(results) == list(range(20))
        assert set(threads) == {"test"}, "a call ran off the worker's thread"
    finally:
        worker.stop()


async def test_a_slow_call_leaves_the_run_free_after_the_inline_wait() -> None:
    worker = Worker("test", inline_wait=0.002)
    ticks = 0
    ticking = trio.Event()

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1
            ticking.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await ticking.wait()
            before = ticks
            await worker.run(time.sleep, 0.5)
            assert ticks - before >= 10, "the run was blocked while the call ran"
            nursery.cancel_scope.cancel()
    finally:
        worker.stop()


async def test_group_commit_groups_what_queued_and_keeps_failures_in_their_group() -> None:
    groups: list[list[int]] = []
    release = trio.Event()

    async def commit(items: Sequence[int]) -> list[int]:
        groups.append(list(items))
        if len(groups) == 1:
            await release.wait()  # everything submitted meanwhile queues behind this one
        if 13 in items:
            raise ValueError("unlucky group")
        return [item * 10 for item in items]

    batch: GroupCommit[int, int] = GroupCommit(commit)
    results: dict[int, int | str] = {}

    async def submit(item: int) -> None:
        try:
            results[item] = await batch.submit(item)
        except ValueError as exc:
            results[item] = str(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit, 1)
        await trio.testing.wait_all_tasks_blocked()
        for item in range(10, 20):
            nursery.start_soon(submit, item)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert [sorted(group) for group in groups] == [[1], list(range(10, 20))]
    assert results[1] == 10
    assert {results[item] for item in range(10, 20)} == {"unlucky group"}
    assert not batch.committing
    assert await batch.submit(2) == 20, "a failed group must not break the next"


async def test_a_cancelled_submitter_strands_nobody() -> None:
    committed: list[int] = []
    gate = trio.Event()

    async def commit(items: Sequence[int]) -> list[None]:
        await gate.wait()
        committed.extend(items)
        return [None] * len(items)

    batch: GroupCommit[int, None] = GroupCommit(commit)
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as first:
            nursery.start_soon(batch.submit, 1)
            await trio.testing.wait_all_tasks_blocked()
        waiter = trio.CancelScope()

        async def second() -> None:
            with waiter:
                await batch.submit(2)

        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        waiter.cancel()  # it gives up waiting; its item is still committed
        first.cancel()
        gate.set()
    assert committed == [1, 2]


async def test_an_unshielded_group_commit_drains_the_others_when_its_committer_is_cancelled() -> (
    None
):
    """With ``shield=False`` the committer's own commit runs in its own cancel scope: cancelled
    while it commits, its commit still finishes (the commit function's promise), and what
    queued meanwhile is committed, shielded, before the cancellation leaves."""
    committed: list[int] = []
    gate = trio.Event()

    async def commit(items: Sequence[int]) -> list[int]:
        with trio.CancelScope(shield=True):  # a commit that cannot be cancelled once begun
            await gate.wait()
        committed.extend(items)
        return [item * 10 for item in items]

    batch: GroupCommit[int, int] = GroupCommit(commit, shield=False)
    results: dict[int, int] = {}

    async def submit(item: int) -> None:
        results[item] = await batch.submit(item)

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as first:
            nursery.start_soon(submit, 1)
            await trio.testing.wait_all_tasks_blocked()
        for item in (2, 3):
            nursery.start_soon(submit, item)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        gate.set()
    assert committed[0] == 1
    assert sorted(committed) == [1, 2, 3]  # 2 and 3 start in any order
    assert results == {1: 10, 2: 20, 3: 30}, "the cancelled committer's commit still finished"
    assert not batch.committing
    assert await batch.submit(4) == 40


@pytest.mark.parametrize("shield", [True, False])
async def test_tasks_a_commit_woke_join_the_next_one_instead_of_committing_alone(
    shield: bool,
) -> None:
    """Eight tasks appending in a loop: once others joined a commit, the next committer yields
    once before it commits, so the tasks that commit woke join it. Without that, the first
    task back committed alone every other time: twice the syncs (issue 28's group commit)."""
    groups: list[int] = []

    async def commit(items: Sequence[int]) -> list[int]:
        groups.append(len(items))
        await trio.sleep(0.001)  # the disk's sync
        return list(items)

    batch: GroupCommit[int, int] = GroupCommit(commit, shield=shield)

    async def writer(w: int) -> None:
        for i in range(10):
            assert await batch.submit(w * 100 + i) == w * 100 + i

    async with trio.open_nursery() as nursery:
        for w in range(8):
            nursery.start_soon(writer, w)
    assert sum(groups) == 80
    assert len(groups) <= 14, groups  # 80 items in groups of 8 at best, not 1 then 7
