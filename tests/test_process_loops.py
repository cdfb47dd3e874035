"""The process layer on both loops (issue 44): the same ``ChildGroup`` under ``trio.run`` and
under ``asyncio.run``, with the same assertions. Owners are real programs in real processes,
killed by real signals; the asyncio programs import no trio and no anyio."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import psutil
import pytest
import trio

import tether
from helpers import TREE, marked, python, reap_zombie_children, unique_session, wait_until
from loops import LOOPS, run_on
from tether import ChildGroup, ExitedInAnotherTask

GRACE = 0.2
BOUND = 2 * GRACE + 1.0
HEADROOM = 8.0  # a loaded 2-core machine; the bound itself is measured in benchmarks/


def gone(pids: list[int]) -> bool:
    """Whether none of ``pids`` runs (a zombie is gone; another parent reaps it)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def tree_pids(session: str) -> list[int]:
    return [process.pid for process in marked(session)]


# Owners: a program on each loop whose group spawns a tree that escapes every way it can, and
# then spawns a sleeper again and again (argv[4] == "spawning") until it is killed.
OWNER_BODY = """
    import os, sys, tether
    out, session, mode, tree = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5]
    async def main():
        async with tether.ChildGroup(session, 1, grace=float(sys.argv[3])) as group:
            await group.spawn([sys.executable, "-c", tree, out + "/tree-ready"])
            open(out + "/keeper", "w").write(str(group.keeper_pid))
            while True:
                if mode == "spawning":
                    await group.spawn(["sleep", "1000"])
                    await SLEEP(0)
                else:
                    await SLEEP(3600)
"""
OWNERS = {
    "trio": "import trio\nSLEEP = trio.sleep\n" + textwrap.dedent(OWNER_BODY) + "trio.run(main)\n",
    "asyncio": "import asyncio\nSLEEP = asyncio.sleep\n"
    + textwrap.dedent(OWNER_BODY)
    + "asyncio.run(main())\n",
}


@pytest.mark.parametrize("mode", ["idle", "spawning"])
@pytest.mark.parametrize("loop", LOOPS)
async def test_an_owner_sigkilled_leaves_no_survivor(tmp_path: Path, loop: str, mode: str) -> None:
    """SIGKILL to the owner, idle or in the middle of its spawns: its keeper stops the whole
    tree, ``setsid``, ``nohup`` and double-forked escapees too, within ``2 x grace + 1 s``."""
    session = unique_session()
    argv = [sys.executable, "-c", OWNERS[loop], str(tmp_path), session, str(GRACE), mode]
    owner = subprocess.Popen([*argv, textwrap.dedent(TREE)])
    try:
        await wait_until(lambda: (tmp_path / "tree-ready").exists(), timeout=30)
        if mode == "spawning":
            await wait_until(lambda: sum(p.name() == "sleep" for p in marked(session)) > 20)
        keeper = psutil.Process(int((tmp_path / "keeper").read_text()))
        # The tree's python, its five sleepers and a level-2 python.
        await wait_until(lambda: len(tree_pids(session)) >= 7)
        tree = tree_pids(session)
        owner.kill()
        owner.wait(timeout=10)
        died = time.monotonic()
        await wait_until(lambda: gone(tree) and not marked(session), timeout=BOUND + HEADROOM)
        assert time.monotonic() - died <= BOUND + HEADROOM
        await wait_until(lambda: not keeper.is_running() or keeper.status() == "zombie")
        await wait_until(reap_zombie_children)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for process in marked(session):
            process.kill()


async def _timed_out(body: Callable[[], Awaitable[None]], tree: list[int]) -> None:
    """``body()`` in ``asyncio.timeout``, which expires once ``tree`` is known."""
    async with asyncio.timeout(None) as deadline:
        task = asyncio.ensure_future(body())
        await wait_until(lambda: len(tree) >= 7, timeout=20)
        deadline.reschedule(asyncio.get_running_loop().time())
        await task


# A child that outlives SIGINT (it writes argv[1].sigint on it) and so holds a teardown for
# one grace; it writes argv[1] once its handler is in place.
STUBBORN = """
    import signal, sys
    signal.signal(signal.SIGINT, lambda *_: open(sys.argv[1] + ".sigint", "w").close())
    open(sys.argv[1], "w").close()
    while True:
        signal.pause()
"""


@pytest.mark.parametrize("how", ["timeout", "cancel", "cancel-again"])
def test_a_native_asyncio_cancellation_stops_the_tree(tmp_path: Path, how: str) -> None:
    """``asyncio.timeout`` or ``task.cancel()`` around a group, which anyio's shield does not
    stop: the tree is stopped all the same and the cancellation goes on. With
    ``cancel-again`` cancellations keep coming while the group stops its tree (a child that
    outlives SIGINT holds the teardown): it still ends, and records the child's status."""
    session = unique_session()
    ready = tmp_path / "tree-ready"
    stubborn = tmp_path / "stubborn"
    tree: list[int] = []
    children: list[tether.Child] = []

    async def body() -> None:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            await group.spawn([sys.executable, "-c", textwrap.dedent(TREE), str(ready)])
            if how == "cancel-again":
                argv = [sys.executable, "-c", textwrap.dedent(STUBBORN), str(stubborn)]
                children.append(await group.spawn(argv))
                await wait_until(lambda: stubborn.exists(), timeout=20)
            await wait_until(lambda: ready.exists() and len(tree_pids(session)) >= 7, timeout=20)
            tree.extend(tree_pids(session))
            await asyncio.sleep(3600)

    async def main() -> None:
        if how == "timeout":
            with pytest.raises(TimeoutError):
                await _timed_out(body, tree)
            return
        task = asyncio.ensure_future(body())
        await wait_until(lambda: len(tree) >= 7, timeout=20)
        task.cancel()
        if how == "cancel-again":
            # The teardown has begun once the stubborn child has its SIGINT: cancel it again
            # and again until it ends.
            await wait_until(lambda: stubborn.with_suffix(".sigint").exists(), timeout=20)
            while not task.done():
                task.cancel()
                await asyncio.sleep(0.01)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gone(tree), f"survivors: {[p for p in tree if not gone([p])]}"
        assert not marked(session)
        # The stubborn child outlived SIGINT; SIGTERM ended it, and its status is known.
        assert [child.returncode for child in children] == [-signal.SIGTERM] * len(children)

    try:
        asyncio.run(main())
        assert gone(tree)
        assert not marked(session)
    finally:
        for process in marked(session):
            process.kill()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancelled_group_stops_its_tree(tmp_path: Path, loop: str) -> None:
    """A group whose task is cancelled (``trio.move_on_after``, ``asyncio.timeout``) leaves no
    process of its tree running when the cancellation reaches its caller."""
    session = unique_session()
    ready = tmp_path / "tree-ready"
    tree: list[int] = []

    async def body() -> None:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            await group.spawn([sys.executable, "-c", textwrap.dedent(TREE), str(ready)])
            await wait_until(lambda: ready.exists() and len(tree_pids(session)) >= 7, timeout=20)
            tree.extend(tree_pids(session))
            await anyio.sleep(3600)

    async def main() -> None:
        if loop == "trio":
            with trio.move_on_after(30) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(body)
                    await wait_until(lambda: len(tree) >= 7, timeout=20)
                    scope.cancel()
        else:
            with pytest.raises(TimeoutError):
                await _timed_out(body, tree)
        assert len(tree) >= 7
        assert gone(tree), f"survivors: {[p for p in tree if not gone([p])]}"

    try:
        run_on(loop, main)
        assert not marked(session)
    finally:
        for process in marked(session):
            process.kill()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_tool_whose_grandchild_holds_stdout_returns_and_names_it(loop: str) -> None:
    """The shell tool that exits while its background job keeps stdout open returns its status
    and output; the holder is named and stopped."""
    session = unique_session()
    results: list[tether.RunResult] = []

    async def main() -> None:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            script = "setsid sleep 600 & echo done; exit 3"
            results.append(await group.run(["bash", "-c", script], linger=0.2))

    try:
        run_on(loop, main)
        (result,) = results
        assert (result.returncode, result.stdout) == (3, b"done\n")
        (holder,) = result.holders
        assert (holder.stream, holder.cmdline) == ("stdout", "sleep 600")
        assert holder.pid is not None
        assert gone([holder.pid])
    finally:
        for process in marked(session):
            process.kill()


@pytest.mark.parametrize("loop", LOOPS)
def test_pipes_stream_both_ways(loop: str) -> None:
    """``stdin=PIPE, stdout=PIPE``: what is sent (less than a pipe holds) comes back through
    ``cat``, and the end of its input is the end of its output."""
    received: list[bytes] = []

    async def main() -> None:
        async with ChildGroup(unique_session(), 1, grace=GRACE) as group:
            child = await group.spawn(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert child.stdin is not None
            assert child.stdout is not None
            await child.stdin.send_all(b"x" * 32_768)
            await child.stdin.aclose()
            while data := await child.stdout.receive_some(65536):
                received.append(data)
            assert await child.wait() == 0

    run_on(loop, main)
    assert b"".join(received) == b"x" * 32_768


@pytest.mark.parametrize("loop", LOOPS)
def test_a_group_exited_by_another_task_is_a_named_error_and_leaves_nothing(loop: str) -> None:
    """An async generator holding a group, closed from another task (as a finalizer does):
    ``ExitedInAnotherTask``, never anyio's or asyncio's cancel-scope error, and its sleeper
    is gone."""
    session = unique_session()
    pids: list[int] = []
    errors: list[BaseException] = []

    async def holder() -> object:
        async with ChildGroup(session, 1, grace=GRACE) as group:
            child = await group.spawn(["sleep", "1000"])
            pids.append(child.pid)
            yield group

    async def main() -> None:
        agen = holder()
        await agen.__anext__()

        async def close() -> None:
            try:
                await agen.aclose()  # type: ignore[attr-defined]
            except BaseException as exc:  # noqa: BLE001 - what it raised is the assertion
                errors.append(exc)

        if loop == "trio":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(close)
        else:
            await asyncio.ensure_future(close())

    try:
        run_on(loop, main)
        (error,) = errors
        assert isinstance(error, ExitedInAnotherTask), repr(error)
        assert "another" in str(error)
        assert gone(pids)
        assert not marked(session)
    finally:
        for process in marked(session):
            process.kill()


def test_an_asyncio_owner_imports_no_trio() -> None:
    """A program under ``asyncio.run`` that spawns and runs through tether loads no trio."""
    code = textwrap.dedent("""
        import asyncio, sys, tether
        async def main():
            async with tether.ChildGroup("s", 1) as group:
                result = await group.run(["true"])
                assert result.returncode == 0, result
        asyncio.run(main())
        print("trio" in sys.modules)
    """)
    done = subprocess.run(python(code), capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_the_asyncio_page_runs_as_printed(tmp_path: Path) -> None:
    """docs/asyncio.md's program, as printed, in a fresh interpreter: what the page says it
    prints, a transcript with the call and its result, and no process left of its session."""
    text = (Path(__file__).parent.parent / "docs" / "asyncio.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    printed = ["0 b'started\\n' ['sleep 600']", "timed out; the sleep is gone: True"]
    assert done.stdout.splitlines() == printed
    assert f"It prints `{printed[0]}`, then `{printed[1]}`" in text
    entries = [json.loads(line) for line in (tmp_path / "session.jsonl").read_text().splitlines()]
    assert [e["type"] for e in entries] == ["tool_call", "tool_result"]
    assert not marked("s1")
