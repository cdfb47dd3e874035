"""tether.signals with real signals, in a fresh process each: its mask and handlers are its own.

Each program enters ``receive()`` before any thread exists, as a harness does, prints ``ready``
and then what it observed as JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psutil
import pytest
import trio

import tether.signals
from helpers import killer_argv, lingering_killer, python, reap_zombie_children, wait_until

PRELUDE = """
    import json, logging, os, signal, sys, trio, tether, tether.signals
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    def say(**fields):
        print(json.dumps(fields), flush=True)
"""


class Lines:
    """JSON lines from a process's stdout (a class, not an async generator, so it needs no
    finalizer)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> dict[str, object] | None:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    async def rest(self) -> list[dict[str, object]]:
        found = []
        while (line := await self.next()) is not None:
            found.append(line)
        return found


@asynccontextmanager
async def program(code: str) -> AsyncIterator[tuple[trio.Process, Lines]]:
    """Run PRELUDE + ``code``; yield the process and its JSON lines; kill it on the way out,
    and wait for what it leaves to this process, a subreaper (a ``ChildGroup``'s keeper that
    outlived it), to end and be reaped."""
    before = {child.pid for child in psutil.Process().children()}
    process = await trio.lowlevel.open_process(
        python(textwrap.dedent(PRELUDE) + textwrap.dedent(code)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        yield process, Lines(process.stdout)
    finally:
        if process.returncode is None:
            process.kill()
        with trio.fail_after(5):
            await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()

        def orphans_gone() -> bool:
            return reap_zombie_children() and all(
                child.pid in before for child in psutil.Process().children()
            )

        await wait_until(orphans_gone)


async def _stderr(process: trio.Process) -> str:
    assert process.stderr is not None
    chunks = []
    while chunk := await process.stderr.receive_some():
        chunks.append(chunk)
    return b"".join(chunks).decode()


async def test_the_sender_of_a_signal_is_named_and_logged() -> None:
    code = """
        async def main():
            sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
            async with tether.signals.receive(*sigs) as events:
                say(ready=os.getpid())
                e = await events.recv()
                say(signo=e.signo, pid=e.sender_pid, uid=e.sender_uid, cmd=e.sender_cmdline)
        trio.run(main)
    """
    async with program(code) as (process, lines):
        with trio.fail_after(10):
            ready = await lines.next()
            assert ready is not None
            target = int(str(ready["ready"]))
            killer = lingering_killer("TERM", target)
            try:
                event = await lines.next()
            finally:
                killer.communicate("\n", timeout=10)
            log = await _stderr(process)
    assert event == {
        "signo": signal.SIGTERM,
        "pid": killer.pid,
        "uid": os.getuid(),
        "cmd": killer_argv("TERM", target),
    }
    assert f"tether.signals received SIGTERM from pid={killer.pid} uid={os.getuid()} cmd=" in log


async def test_a_harness_child_dies_on_sigterm_while_the_harness_blocks_it() -> None:
    code = """
        import subprocess
        async def main():
            async with tether.signals.receive(signal.SIGTERM):
                async with tether.ChildGroup("sigmask", 1, grace=0.2) as group:
                    child = await group.spawn(["sleep", "1000"])
                    os.kill(child.pid, signal.SIGTERM)
                    with trio.fail_after(5):
                        code = await child.wait()
                    plain = subprocess.Popen(["sleep", "1000"])
                    blk = open(f"/proc/{plain.pid}/status").read().split("SigBlk:")[1].split()[0]
                    plain.kill(); plain.wait()
                    say(tether_child=code, subprocess_sigblk=int(blk, 16))
        trio.run(main)
    """
    async with program(code) as (_, lines):
        with trio.fail_after(10):
            result = await lines.next()
    assert result["tether_child"] == -signal.SIGTERM
    assert int(str(result["subprocess_sigblk"])) & (1 << (signal.SIGTERM - 1)), (
        "expected the pitfall: a plain subprocess inherits the blocked mask"
    )


async def test_a_process_signalling_itself_is_the_sender() -> None:
    code = """
        async def main():
            async with tether.signals.receive(signal.SIGUSR1, signal.SIGUSR2) as events:
                os.kill(os.getpid(), signal.SIGUSR1)
                signal.raise_signal(signal.SIGUSR2)
                a, b = await events.recv(), await events.recv()
                say(events=[[e.signo, e.sender_pid, e.name] for e in (a, b)])
        trio.run(main)
    """
    async with program(code) as (process, lines):
        with trio.fail_after(10):
            result = await lines.next()
    # Standard signals are a pending set, not a queue: the kernel hands over a thread's own
    # (raise_signal) before the process's (kill), whatever the order they were sent in.
    assert sorted(result["events"]) == [  # type: ignore[type-var]
        [signal.SIGUSR1, process.pid, "SIGUSR1"],
        [signal.SIGUSR2, process.pid, "SIGUSR2"],
    ]


async def test_an_unconsumed_signal_is_delivered_again_on_exit() -> None:
    code = """
        async def main():
            async with tether.signals.receive(signal.SIGUSR1) as events:
                os.kill(os.getpid(), signal.SIGUSR1)
                await trio.testing.wait_all_tasks_blocked()
                say(buffered=events.statistics().buffered)
            say(survived=True)
        import trio.testing
        trio.run(main)
    """
    async with program(code) as (process, lines):
        with trio.fail_after(10):
            result = await lines.rest()
            await process.wait()
    assert result == [{"buffered": 1}]
    assert process.returncode == -signal.SIGUSR1, "SIGUSR1's default action should have run"


async def test_a_signal_arriving_after_exit_gets_the_previous_handler() -> None:
    code = """
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append("python handler"))
        async def main():
            async with tether.signals.receive(signal.SIGUSR1):
                pass
            os.kill(os.getpid(), signal.SIGUSR1)
            await trio.sleep(0)
            say(got=got, blocked=sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        trio.run(main)
    """
    async with program(code) as (_, lines):
        with trio.fail_after(10):
            result = await lines.next()
    assert result == {"got": ["python handler"], "blocked": []}


def test_receive_needs_a_signal_and_the_main_thread() -> None:
    async def no_signal() -> None:
        async with tether.signals.receive():
            pass

    with pytest.raises(ValueError, match="at least one"):
        trio.run(no_signal)

    errors: list[BaseException] = []

    def in_thread() -> None:
        async def main() -> None:
            async with tether.signals.receive(signal.SIGUSR1):
                pass

        try:
            trio.run(main)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(10)
    assert len(errors) == 1
    assert "main thread" in str(errors[0])


def test_event_describes_itself() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 11, 29, tzinfo=UTC)
    known = tether.SignalEvent(signal.SIGTERM, 42, 1000, ("kill", "-TERM", "7"), at)
    assert known.describe() == "received SIGTERM from pid=42 uid=1000 cmd=kill -TERM 7"
    unknown = tether.SignalEvent(signal.SIGHUP, None, None, None, at)
    assert unknown.describe() == "received SIGHUP from an unknown sender"
    assert tether.signals.SignalEvent is tether.SignalEvent
    assert os.getpid() > 0


async def test_a_signal_read_after_the_receiver_closed_is_delivered_again_on_exit() -> None:
    code = """
        async def main():
            async with tether.signals.receive(signal.SIGUSR2) as events:
                events.close()
                os.kill(os.getpid(), signal.SIGUSR2)
                await trio.testing.wait_all_tasks_blocked()
                say(closed=True)
            say(survived=True)
        import trio.testing
        trio.run(main)
    """
    async with program(code) as (process, lines):
        with trio.fail_after(10):
            result = await lines.rest()
            await process.wait()
    assert result == [{"closed": True}]
    assert process.returncode == -signal.SIGUSR2
