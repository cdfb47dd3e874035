"""Exactly once at the engine (issue 27, ADR 0034), with real harness processes: a prompt the
daemon acknowledged is in the session's transcript exactly once, whatever harness or daemon was
killed or stopped on the way, and no prompt reaches an engine twice."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from helpers import QUICK_HARNESS, kill_marked, python, unique_session, wait_until
from test_agentd import directory, events, harness_processes, of_epoch, running
from tether import Backoff, Delivered, DeliveryFailed, wire
from tether.agentd._client import request
from tether.agentd._link import Link
from tether.cli._request import request as cli_request
from tether.journal import Event, Message, ToolResult, scan

__all__ = ["directory"]  # a fixture

ROUNDS = int(os.environ.get("TETHER_DELIVERY_ROUNDS", "5"))
"""Rounds of the SIGKILL burst (``make torture`` runs the issue's 20)."""
BUSY_HARNESS = """
import random, trio
from tether import run_harness

async def engine(commands, ctx):
    async for command in commands:  # a turn of up to 20 ms per prompt: kills land in turns
        await trio.sleep(random.random() * 0.02)

raise SystemExit(run_harness(engine))
"""


def records(directory: Path, session: str) -> list[str]:
    """The prompt ids the session's transcript records, once per record."""
    path = directory / "sessions" / session / f"{session}.jsonl"
    entries = scan(path.read_bytes()).entries if path.exists() else []
    return [e.prompt_id for e in entries if isinstance(e, Message) and e.prompt_id is not None]


def turn_ends(directory: Path, session: str) -> list[tuple[str, str]]:
    """The transcript's turn ends, in order: ``(kind, prompt_id)``."""
    path = directory / "sessions" / session / f"{session}.jsonl"
    entries = scan(path.read_bytes()).entries if path.exists() else []
    ends = [e for e in entries if isinstance(e, Event) and e.kind in ("turn_done", "turn_aborted")]
    return [(e.kind, e.data["prompt_id"]) for e in ends]


async def test_a_prompt_read_behind_a_busy_engine_survives_its_harness_s_sigkill(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine is in a tool; a second prompt reaches the harness's loop and waits; the
    harness is SIGKILLed. The second prompt was not acknowledged, is delivered to the next
    harness and recorded once; the first one's turn is sealed, not run again."""
    session = unique_session()
    handed = trio.Event()
    send = Link.send

    async def watched(link: Link, message: wire.Message) -> bool:
        sent = await send(link, message)
        if isinstance(message, wire.Prompt) and message.id == "second":
            handed.set()
        return sent

    monkeypatch.setattr(Link, "send", watched)
    async with running(directory) as daemon:
        first = await daemon.agentd.deliver(session, wire.Prompt("first", "work long", {}))
        await wait_until(lambda: len(of_epoch(session, first.epoch)) >= 3)  # the agent runs
        async with trio.open_nursery() as nursery:
            second: list[object] = []

            async def deliver_second() -> None:
                prompt = wire.Prompt("second", "then this", {"steps": 1})
                second.append(await daemon.agentd.deliver(session, prompt))

            nursery.start_soon(deliver_second)
            await handed.wait()
            harness = daemon.agentd._sessions.get(session).harness
            assert harness is not None
            assert harness.link is not None
            assert await harness.link.roundtrip()  # its loop has read the second prompt
            assert records(directory, session) == ["first"]
            assert second == []  # read, not recorded: not acknowledged
            os.kill(first.pid, signal.SIGKILL)
        (delivered,) = second
        assert isinstance(delivered, Delivered)
        assert (delivered.prompt_id, delivered.recorded) == ("second", True)
        assert delivered.pid != first.pid
        assert delivered.epoch > first.epoch
        assert records(directory, session) == ["first", "second"]
        assert await daemon.store.pending() == []
        await wait_until(lambda: ("turn_done", "second") in turn_ends(directory, session))
    path = directory / "sessions" / session / f"{session}.jsonl"
    entries = scan(path.read_bytes()).entries
    sealed = [e for e in entries if isinstance(e, Event) and e.kind == "turn_aborted"]
    assert [e.data["prompt_id"] for e in sealed] == ["first"]
    assert "died without recording why" in sealed[0].data["reason"]
    # the next harness's engine was told of "first" (ctx.interrupted), then took "second"
    assert turn_ends(directory, session) == [
        ("turn_aborted", "first"),
        ("turn_done", "first"),
        ("turn_done", "second"),
    ]
    cut = [e for e in entries if isinstance(e, ToolResult) and e.status == "interrupted"]
    assert len(cut) == 1  # the first prompt's agent call, sealed by the next harness
    log = (directory / "sessions" / session / "harness.log").read_text()
    assert "prompt first was cut short by an earlier harness" in log


@pytest.mark.slow
def test_a_stopped_daemon_doubles_no_prompt(tmp_path: Path) -> None:
    """400 sends in flight to a real ``tether agentd`` while it is SIGSTOPped for 8 s: every
    one is acknowledged and recorded exactly once (the delivery of before redelivered the
    ones its ordinary-clock deadline passed, and engines got them twice)."""
    tmp_path.chmod(0o700)
    sock = tmp_path / "agentd.sock"
    with open(tmp_path / "agentd.log", "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "tether", "agentd", "--socket", str(sock), "--heartbeat",
             "0.5", "--stop-harnesses", "--", *python(QUICK_HARNESS)],
            stdout=log, stderr=log,
        )  # fmt: skip
    sessions = [unique_session() for _ in range(10)]
    try:
        answers = trio.run(_stopped_burst, sock, sessions, daemon.pid)
        assert len(answers) == 400
        for session in sessions:
            kept = records(tmp_path, session)
            assert len(kept) == len(set(kept)) == 40, f"{session}: {len(kept)} records"
            assert {a["prompt_id"] for a in answers if a["session"] == session} == set(kept)
    finally:
        daemon.send_signal(signal.SIGCONT)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        for session in sessions:
            kill_marked(session)


async def _stopped_burst(sock: Path, sessions: list[str], pid: int) -> list[dict[str, object]]:
    await wait_until(sock.exists, timeout=30)
    for session in sessions:
        await request(str(sock), "start", session)
    answers: list[dict[str, object]] = []

    async def send(n: int) -> None:
        answers.append(await request(str(sock), "send", sessions[n % 10], f"prompt-{n}"))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for n in range(400):
                nursery.start_soon(send, n)
            # Stopped once some are answered: the rest are in flight, queued or recorded.
            await wait_until(lambda: len(answers) >= 20, timeout=60)
            os.kill(pid, signal.SIGSTOP)
            await trio.sleep(8)  # the stop itself, as long as the issue's
            os.kill(pid, signal.SIGCONT)
    return answers


@pytest.mark.slow
async def test_sigkills_during_a_burst_lose_and_double_nothing(directory: Path) -> None:
    """200 prompts to 10 sessions, harnesses SIGKILLed at random points, ``ROUNDS`` rounds:
    every acknowledged prompt is recorded exactly once; a failed one at most once."""
    rng = random.Random(int(os.environ.get("TETHER_DELIVERY_SEED", "27")))
    busy = python(BUSY_HARNESS)
    quick = Backoff(first=0.05, cap=0.2)
    async with running(
        directory, argv=busy, spawn_limit=4, restart_limit=(1000, 60.0), restart_backoff=quick
    ) as daemon:
        agentd = daemon.agentd
        for round_ in range(ROUNDS):
            sessions = [unique_session() for _ in range(10)]
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(agentd.start_agent, session)
            acknowledged: dict[str, str] = {}
            failed: dict[str, str] = {}

            async def deliver(
                n: int,
                sessions: list[str] = sessions,
                acknowledged: dict[str, str] = acknowledged,
                failed: dict[str, str] = failed,
                round_: int = round_,
            ) -> None:
                session = sessions[n % 10]
                prompt = wire.Prompt(f"r{round_}-{n}", f"prompt {n}", {})
                try:
                    await agentd.deliver(session, prompt)
                except DeliveryFailed:
                    failed[prompt.id] = session
                else:
                    acknowledged[prompt.id] = session

            async def kill(sessions: list[str] = sessions) -> None:
                for _ in range(6):
                    await trio.sleep(rng.uniform(0.0, 0.4))
                    rows = {row.session: row for row in agentd.status()}
                    row = rows.get(rng.choice(sessions))
                    if row is not None and row.pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(row.pid, signal.SIGKILL)

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kill)
                    for n in range(200):
                        nursery.start_soon(deliver, n)
            kept = {session: records(directory, session) for session in sessions}
            for session, ids in kept.items():
                assert len(ids) == len(set(ids)), f"round {round_}: {session} recorded twice"
            for prompt_id, session in acknowledged.items():
                assert prompt_id in kept[session], f"round {round_}: {prompt_id} lost"
            assert len(acknowledged) + len(failed) == 200
            for session in sessions:
                await agentd.stop_agent(session)
    kinds = [row["kind"] for row in events(directory)]
    assert "phantom" not in kinds


async def test_send_no_wait_answers_queued_while_the_engine_is_busy(directory: Path) -> None:
    """``tether send --no-wait``: answered once queued, though the engine is in a long turn;
    the prompt stays queued (not settled) until an engine takes it."""
    session = unique_session()
    async with running(directory) as daemon:
        first = await daemon.agentd.deliver(session, wire.Prompt("first", "work long", {}))
        await wait_until(lambda: len(of_epoch(session, first.epoch)) >= 3)
        sock = str(directory / "agentd.sock")
        answer = await trio.to_thread.run_sync(
            lambda: cli_request(sock, "send", session, "later", wait=False, timeout=30)
        )
        assert set(answer) == {"session", "prompt_id"}
        assert [q.id for q in await daemon.store.pending()] == [answer["prompt_id"]]
        assert records(directory, session) == ["first"]


async def test_a_stopping_daemon_starts_no_harness_and_keeps_the_prompt_queued(
    directory: Path,
) -> None:
    """A ``--no-wait`` prompt waits for an engine in a long turn, and the daemon stops
    (stopping its harnesses): the delivery under way is ended, so no harness is started behind
    the stop to outlive it (one was, and the suite found it left on Python 3.13), and the
    prompt stays queued for the next daemon, which delivers it."""
    session = unique_session()
    async with running(directory) as daemon:
        await daemon.agentd.deliver(session, wire.Prompt("first", "work long", {}))
        queued = await daemon.agentd.deliver_later(session, "for the next daemon")
        # The engine is in its long turn: the delivery waits for it, and the stop below ends
        # that harness, which the delivery took for a failed attempt and started another.
    assert harness_processes(session) == []
    async with running(directory) as daemon:
        await wait_until(lambda: queued.prompt_id in records(directory, session), timeout=30)
        with trio.fail_after(10):
            while await daemon.store.pending():
                await trio.sleep(0.01)


async def test_a_send_retried_with_its_id_is_one_prompt(directory: Path) -> None:
    """``tether send`` that gives up (``--timeout``) names the prompt's id; sending again with
    ``--id`` is the same prompt: both deliveries answer with it, and it is recorded once."""
    session = unique_session()
    sock = str(directory / "agentd.sock")
    tether = [sys.executable, "-m", "tether", "send", "--socket", sock]
    # Not reaping orphans in this process, as an embedded daemon must not (Agentd's docs): its
    # reaper once took the given-up send's exit before trio did, which then read 0 for 75.
    async with running(directory, reap_orphans=False) as daemon:
        await daemon.agentd.deliver(session, wire.Prompt("first", "a turn", {"steps": 20}))
        given_up = await trio.run_process(
            [*tether, "--timeout", "0.5", session, "second"], capture_stderr=True, check=False
        )
        assert given_up.returncode == 75, given_up.stderr
        said = given_up.stderr.decode()
        prompt_id = said.split("--id ")[1].split()[0]
        again = await trio.run_process(
            [*tether, "--id", prompt_id, session, "second"], capture_stdout=True, check=False
        )
        assert again.returncode == 0
        assert json.loads(again.stdout)["prompt_id"] == prompt_id
        assert records(directory, session) == ["first", prompt_id]
        # The given-up client's delivery went on in the daemon, and ended with the same report.
        counts = daemon.agentd._outbox.counts
        await wait_until(lambda: counts.delivered == 3, timeout=10)
        assert counts.failed == 0
