"""The backend seam's promises on both loops (ADR 0053): a system task's ``finally`` runs
however late in the run it was started, and ``shielded`` work finishes whatever cancels its
caller."""

from __future__ import annotations

import asyncio

import pytest
import trio

from loops import LOOPS, run_on
from tether import _backend


async def forever(ran: list[str]) -> None:
    try:
        await _backend.sleep(3600)
    finally:
        ran.append("finally")


@pytest.mark.parametrize("loop", LOOPS)
def test_a_system_task_started_as_the_run_ends_still_runs_its_finally(loop: str) -> None:
    """Started by a system task woken by the main task's last step: asyncio's end cancels it
    before its first step (so its body, and its ``finally``, would never run); it runs, and
    ends at its first wait (a keeper's reader, started by a replacement as the run ended)."""
    ran: list[str] = []

    async def starter(woken: _backend.Event) -> None:
        await woken.wait()
        _backend.spawn_system_task(forever, ran, name="late")

    async def main() -> None:
        woken = _backend.event()
        _backend.spawn_system_task(starter, woken, name="starter")
        await _backend.sleep(0.01)
        woken.set()

    run_on(loop, main)
    assert ran == ["finally"]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_system_task_started_by_another_s_end_still_runs_its_finally(loop: str) -> None:
    """Started while the run ends, by another system task's ``finally`` (a keeper replaced as
    the run ends): the run's end still cancels it and waits for it."""
    ran: list[str] = []

    async def spawner() -> None:
        try:
            await _backend.sleep(3600)
        finally:
            _backend.spawn_system_task(forever, ran, name="latest")

    async def main() -> None:
        _backend.spawn_system_task(spawner, name="spawner")
        await _backend.sleep(0.01)

    run_on(loop, main)
    assert ran == ["finally"]


@pytest.mark.parametrize("loop", LOOPS)
def test_shielded_work_ends_whatever_cancels_its_caller(loop: str) -> None:
    """The caller is cancelled again and again while the work runs: the work ends, then the
    caller's cancellation goes on (at its next checkpoint)."""
    done: list[str] = []

    async def work() -> None:
        done.append("began")
        for _ in range(5):
            await _backend.sleep(0.01)
        done.append("work")

    async def caller() -> None:
        await _backend.shielded(work)
        await _backend.checkpoint()
        done.append("after")  # never: the cancellation goes on

    async def main() -> None:
        if loop == "trio":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                while not done:
                    await trio.sleep(0.001)
                nursery.cancel_scope.cancel()
            return
        task = asyncio.ensure_future(caller())
        while not done:
            await asyncio.sleep(0.001)
        while not task.done():
            task.cancel()
            await asyncio.sleep(0.002)
        assert task.cancelled()

    run_on(loop, main)
    assert done == ["began", "work"]
