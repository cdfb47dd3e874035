"""Issue 41, row 3: a failed turn is visible where a person looks. The harness reports each
turn's end with how it went (``TurnEnded``, wire revision 6, ADR 0051), read from its
transcript; the daemon keeps the last outcome for ``tether ps`` (until a turn succeeds), emits
``turn_failed`` for a failure, and answers ``tether send --wait-reply`` with the outcome, which
exits 1 for a failed turn. Real processes: the OpenAI harness against the fake model, and a
newcomer's engine that raises."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from helpers import agentd_events, python, unique_session, wait_until
from tether import Agentd, SqliteEpochStore, TurnUnknown
from tether.cli._ps import table
from tether.harness._outcome import turn_outcome
from tether.harness.openai._fake import FakeModel
from tether.journal import Entry, Event, Message
from tether.wire import TurnEnded

HEARTBEAT = 0.2


def _message(seq: int, role: str, content: str, prompt_id: str | None = None) -> Message:
    return Message(f"msg_{seq:016x}", seq, "2026-12-06T00:00:00Z", role, content, prompt_id)


def _event(seq: int, kind: str, **data: Any) -> Event:
    return Event(f"event_{seq:016x}", seq, "2026-12-06T00:00:00Z", kind, data)


def test_the_outcome_is_read_from_the_turns_own_entries() -> None:
    """A failure naming the prompt fails its turn; a cut one is ``cut`` with the seal's reason;
    a resumed one is judged by what the resumption did; another prompt's failure, or one after
    the next prompt's record, is not this turn's; the reply is the last assistant message."""
    entries: Sequence[Entry] = [
        _message(1, "user", "A", "a"),
        _event(2, "model_error", prompt_id="b", failure="connect", status=0, detail="other"),
        _message(3, "assistant", "first"),
        _message(4, "assistant", "second"),
        _message(5, "user", "B", "b"),
        _event(6, "model_error", prompt_id="b", failure="http", status=429, detail="slow"),
        _message(7, "user", "C", "c"),
        _event(8, "turn_aborted", prompt_id="c", reason="worker shut down mid-turn (SIGTERM)"),
        _message(9, "user", "D", "d"),
        _event(10, "turn_aborted", prompt_id="d", reason="died"),
        _event(11, "turn_resumed", prompt_id="d"),
        _message(12, "assistant", "resumed"),
        _event(13, "turn_done", prompt_id="d"),
    ]
    assert turn_outcome(entries, "a") == TurnEnded("a", reply="second")
    assert turn_outcome(entries, "b") == TurnEnded("b", "http", 429, "slow")
    assert turn_outcome(entries, "c") == TurnEnded(
        "c", "cut", 0, "worker shut down mid-turn (SIGTERM)"
    )
    assert turn_outcome(entries, "d") == TurnEnded("d", reply="resumed")
    assert turn_outcome(entries, "d").brief() == "ok"
    assert turn_outcome(entries, "b").brief() == "http:429"


@asynccontextmanager
async def running(directory: Path, argv: list[str], *, stop: bool = True) -> AsyncIterator[Agentd]:
    async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
        agentd = Agentd(store, directory / "agentd.sock", argv, heartbeat=HEARTBEAT,
                        grace=0.3, start_timeout=15.0)  # fmt: skip
        async with agentd.running(stop_harnesses=stop):
            yield agentd


def _openai(fake: FakeModel) -> list[str]:
    return [sys.executable, "-m", "tether.harness.openai", "--base-url", fake.url,
            "--model", "fake"]  # fmt: skip


async def _send(directory: Path, session: str, text: str) -> tuple[int, dict[str, Any], str]:
    """``tether send --wait-reply`` from a shell: exit code, the JSON answer, stderr."""
    done = await trio.run_process(
        [sys.executable, "-m", "tether", "send", "--socket", str(directory / "agentd.sock"),
         "--wait-reply", session, text],
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, answer, done.stderr.decode()


def _row(agentd: Agentd, session: str) -> Any:
    (found,) = [row for row in agentd.status() if row.session == session]
    return found


async def test_a_failed_model_request_shows_in_ps_events_and_send_wait_reply(
    agentd_dir: Path,
) -> None:
    """Before: ``tether send`` said ``recorded: true`` and exit 0, ps said ``idle`` and
    ``delivered``, no event. Now: exit 1 naming ``http 429`` and the server's words,
    ps's LAST_TURN ``http:429`` until a turn succeeds, one ``turn_failed`` event with
    its fields; the next, good turn exits 0 with its reply and ps says ``ok``."""
    fake = FakeModel([[("status", 429)], [("text", "all good now")]])
    session = unique_session()
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        async with running(agentd_dir, _openai(fake)) as agentd:
            await agentd.start_agent(session)
            code, answer, err = await _send(agentd_dir, session, "one")
            assert code == 1, (answer, err)
            assert answer["turn"]["failure"] == "http"
            assert answer["turn"]["status"] == 429
            assert "the turn failed: http 429" in err, err
            assert err.count("\n") == 1, err  # one line, no traceback
            row = _row(agentd, session)
            assert (row.last_turn, row.state) == ("http:429", "attached")
            assert "http:429" in table([row.to_json()])
            (event,) = [e for e in agentd_events(agentd_dir, session) if e["kind"] == "turn_failed"]
            assert (event["failure"], event["status"]) == ("http", 429)
            assert event["prompt_id"] == answer["prompt_id"]
            shown = await trio.run_process(
                [sys.executable, "-m", "tether", "events", "--socket",
                 str(agentd_dir / "agentd.sock"), "--session", session, "-n", "1"],
                capture_stdout=True,
            )  # fmt: skip
            assert b"turn_failed" in shown.stdout, shown.stdout
            assert b"failure=http status=429" in shown.stdout, shown.stdout

            code, answer, err = await _send(agentd_dir, session, "two")
            assert code == 0, (answer, err)
            assert answer["turn"]["reply"] == "all good now"
            assert not answer["turn"]["failure"]
            assert _row(agentd, session).last_turn == "ok"
            with pytest.raises(TurnUnknown, match="no such session"):
                await agentd.turn("nosuch", answer["prompt_id"])
            assert "nosuch" not in [row.session for row in agentd.status()]  # none made
        nursery.cancel_scope.cancel()
    kinds = [e["kind"] for e in agentd_events(agentd_dir, session)]
    assert kinds.count("turn_failed") == 1, kinds


RAISER = """
import os
from tether import run_harness

async def engine(commands, ctx):
    async for prompt in commands:
        if prompt.text == "boom":
            raise ValueError("a newcomer's bug")
        if prompt.text == "fail":
            await ctx.fail_turn(prompt.id, "no_tokens", status=402, detail="out of credit")
            continue
        await ctx.transcript.append_message("assistant", "echo " + prompt.text)

raise SystemExit(run_harness(engine))
"""


async def test_an_engine_that_raises_or_fails_a_turn_is_seen_as_failed(agentd_dir: Path) -> None:
    """A newcomer's engine that raised looked like any other turn. Now ``--wait-reply`` says
    the harness exited mid-turn, or that the turn was cut; the next harness ends that turn
    ``cut`` with the reason the seal gave (the engine's exception), an event;
    ``ctx.fail_turn`` fails a turn with the engine's own words, and the harness lives on."""
    session = unique_session()
    async with running(agentd_dir, python(RAISER)) as agentd:
        await agentd.start_agent(session)
        code, answer, err = await _send(agentd_dir, session, "boom")
        assert code == 1, (answer, err)
        # Its Recorded may reach the daemon before the exit (the waiter sees the harness
        # exit) or not (the prompt goes to a second harness, which ends the turn ``cut``).
        assert answer["turn"]["failure"] in ("exited", "cut"), answer
        assert "exited with code 1" in err or "ValueError: a newcomer's bug" in err, err

        code, answer, err = await _send(agentd_dir, session, "fail")
        assert code == 1, (answer, err)
        assert (answer["turn"]["failure"], answer["turn"]["status"]) == ("no_tokens", 402)
        assert "no_tokens 402: out of credit" in err, err
        # The cut turn was ended by the harness that took "fail": reported, and an event.
        failed = [e for e in agentd_events(agentd_dir, session) if e["kind"] == "turn_failed"]
        assert [e["failure"] for e in failed] == ["cut", "no_tokens"], failed
        assert "ValueError: a newcomer's bug" in failed[0]["reason"], failed[0]
        assert _row(agentd, session).last_turn == "no_tokens:402"

        code, answer, err = await _send(agentd_dir, session, "hi")
        assert (code, answer["turn"]["reply"]) == (0, "echo hi"), (answer, err)
        assert _row(agentd, session).last_turn == "ok"


async def test_a_restarted_daemon_learns_the_last_failure_without_a_second_event(
    agentd_dir: Path,
) -> None:
    """The harness reports its last turns again on each new connection (``again``): a daemon
    restarted after a failed turn shows it in ps at once, and does not emit it twice."""
    fake = FakeModel([[("status", 503)]])
    session = unique_session()
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        async with running(agentd_dir, _openai(fake), stop=False) as agentd:
            delivered = await agentd.deliver(session, "one")
            outcome = await agentd.turn(session, delivered.prompt_id)
            assert outcome.brief() == "http:503"
        async with running(agentd_dir, _openai(fake)) as agentd:
            await wait_until(lambda: any(row.last_turn for row in agentd.status()), timeout=30)
            assert _row(agentd, session).last_turn == "http:503"
            again = await agentd.turn(session, delivered.prompt_id)
            assert (again.failure, again.again) == ("http", True)
        nursery.cancel_scope.cancel()
    kinds = [e["kind"] for e in agentd_events(agentd_dir, session)]
    assert kinds.count("turn_failed") == 1, kinds
