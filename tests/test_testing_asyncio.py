"""tether.testing's deadlock detection in asyncio tests (issue 45), through ``pytester`` in a
subprocess: a tether channel whose receiver waits forever because a clone made by a task that
has ended keeps it open fails the test in about a cushion, naming the channel, the waiting
task's line and the clone's line, under ``asyncio.run`` and under anyio's pytest plugin on its
asyncio backend; a loop that can still be woken (a timer, a thread, a descriptor, a signal
handler) is never called deadlocked."""

from __future__ import annotations

import time

import pytest

from test_doc_blocks import blocks

pytest_plugins = ["pytester"]

INI = """
[pytest]
tether_deadlock = true
tether_deadlock_cushion = 0.3
"""

STRAY = """
import asyncio, anyio, pytest, tether

kept = []

async def engine(commands):
    async for command in commands:
        pass

def test_under_asyncio_run():
    async def main():
        tx, rx = tether.channel(str, name="commands")
        async def connection():
            kept.append(tx.clone(name="stray"))
        await asyncio.create_task(connection(), name="connection")
        tx.close()
        await engine(rx)
    asyncio.run(main())

@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_under_anyio(anyio_backend):
    tx, rx = tether.channel(str, name="commands")
    async def connection():
        kept.append(tx.clone(name="stray"))
    async with anyio.create_task_group() as group:
        group.start_soon(connection, name="connection")
    tx.close()
    await engine(rx)
"""


def _lines(text: str) -> list[int]:
    """The lines of ``STRAY``, as written to ``test_it.py``, that hold ``text``."""
    source = STRAY.lstrip("\n").splitlines()
    return [n for n, line in enumerate(source, 1) if text in line]


def _line(text: str) -> int:
    (line,) = _lines(text)
    return line


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_it=source)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-q", timeout=60
    )


def test_a_stray_clone_of_an_ended_task_fails_the_test_as_printed(
    pytester: pytest.Pytester,
) -> None:
    """The report names the channel, the waiting line and the clone's line, as
    docs/testing.md prints it."""
    started = time.monotonic()
    result = run(pytester, STRAY)
    took = time.monotonic() - started
    result.assert_outcomes(failed=2)
    # Count the failure sections only: how much of each message the short summary
    # repeats depends on the terminal's width.
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("tether: deadlock: every task of the asyncio loop has waited") == 2, out
    waits = f"waits at test_it.py:{_line('async for command')} in engine: async for command"
    assert out.count(waits) == 2, out
    for clone in _lines("kept.append(tx.clone"):
        made = f"a sender 'stray' made at test_it.py:{clone} (by task 'connection', now ended)"
        assert made in out, out
    assert took < 30, f"{took:.1f}s"
    printed = [b for lang, b in blocks("docs/testing.md") if lang == "text"][-1]
    for line in printed.replace("1.0 s", "0.3 s").splitlines():
        assert line.strip() in out, line


WOKEN = """
import asyncio, os, signal, threading, time, tether

def run(wake):
    async def main():
        tx, rx = tether.channel(int, name="later")
        await asyncio.gather(rx.recv(), wake(tx))
    asyncio.run(main())

def test_a_timer():
    async def wake(tx):
        await asyncio.sleep(1.0)
        tx.try_send(1)
    run(wake)

def test_a_thread():
    async def wake(tx):
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (time.sleep(1.0),
                         loop.call_soon_threadsafe(tx.try_send, 1))).start()
    run(wake)

def test_a_descriptor():
    async def wake(tx):
        r, w = os.pipe()
        loop = asyncio.get_running_loop()
        def readable():
            loop.remove_reader(r)
            tx.try_send(1)
        loop.add_reader(r, readable)
        threading.Timer(1.0, os.write, (w, b"x")).start()
        await asyncio.sleep(0)
    run(wake)

def test_a_signal_handler():
    children = []
    async def wake(tx):
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, tx.try_send, 1)
        argv = ["sh", "-c", f"sleep 1; kill -USR1 {os.getpid()}"]
        children.append(os.posix_spawnp("sh", argv, os.environ))
    run(wake)
    os.waitpid(children[0], 0)
"""


@pytest.mark.slow  # four loops woken after 1 s each, in a pytest of its own
def test_a_loop_that_can_still_be_woken_is_never_called_deadlocked(
    pytester: pytest.Pytester,
) -> None:
    result = run(pytester, WOKEN)
    result.assert_outcomes(passed=4)
    assert "deadlock" not in result.stdout.str()
