"""agentd's event log: JSON lines for people, a channel per subscriber, and a slow subscriber
cut off instead of stalling the daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether import AgentEvent, ChannelClosed
from tether.agentd._events import EventLog


async def test_events_are_json_lines_and_reach_every_subscriber(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", host="h1")
    one, two = log.subscribe(), log.subscribe()
    log.emit(AgentEvent("s1", "spawned", 1, 42, at=1.5))
    log.emit(AgentEvent("s1", "delivered", 1, 42, "p7 attempt 2", 1.5, prompt_id="p7", attempt=2))
    log.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert first == {
        "time": "1970-01-01T00:00:01.500Z",  # ISO 8601, UTC
        "session": "s1",
        "kind": "spawned",
        "epoch": 1,
        "pid": 42,
        "detail": "",
        "at": 1.5,
        "host": "h1",
        "prompt_id": None,
        "attempt": None,
        "code": None,
        "reason": None,
        "failure": None,
        "status": None,
    }
    assert (second["prompt_id"], second["attempt"]) == ("p7", 2)  # fields, not only in text
    for feed in (one, two):
        assert (await feed.recv()).kind == "spawned"
        assert (await feed.recv()).kind == "delivered"
        with pytest.raises(ChannelClosed):
            await feed.recv()


async def test_a_subscriber_that_falls_behind_is_cut_off(caplog: pytest.LogCaptureFixture) -> None:
    log = EventLog(None)
    slow = log.subscribe(capacity=2)
    for n in range(5):
        log.emit(AgentEvent("s1", "attached", n))
    assert [(await slow.recv()).epoch for _ in range(2)] == [0, 1]
    with pytest.raises(ChannelClosed):
        await slow.recv()
    assert "fell behind and was cut off" in caplog.text
