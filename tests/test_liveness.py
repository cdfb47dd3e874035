"""tether.liveness: incident 003's traces replayed on an injected clock, thresholds from a real
SQLite ledger, ``watch_turn`` under trio's MockClock, and salvage. No real waiting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from tether.liveness import (
    ALIVE,
    HostClock,
    Ledger,
    ManualClock,
    Stale,
    StreamClock,
    Threshold,
    Thresholds,
    TurnStats,
    salvage,
    verdict,
    watch_turn,
)

TRACES = Path(__file__).parent / "data" / "liveness"
POLL = 1.0


async def learned(tmp_path: Path) -> Thresholds:
    """A route with 20 healthy turns: first tokens after 2 to 8 s, largest gaps 10 to 18 s."""
    async with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        for n in range(20):
            await ledger.record(TurnStats("r", 2 + n * 0.3, 10 + n * 0.4, 50, "completed", 0.0))
        return await ledger.thresholds("r")


def replay(trace: dict[str, Any], thresholds: Thresholds) -> tuple[float | None, StreamClock]:
    """Play the trace on a ManualClock, polling a verdict every second of awake time; the
    awake time of the first stale verdict (``None``: never stale)."""
    clock = ManualClock()
    stream = StreamClock("r", clock=clock)
    events = list(trace["events"])
    now = 0.0
    while now <= trace["until"]:
        while events and events[0]["t"] <= now:
            event = events.pop(0)
            if "part" in event:
                stream.mark(event["part"])
            else:
                clock.suspend(event["suspend"])
        if isinstance(verdict(stream, thresholds), Stale):
            return now, stream
        clock.advance(POLL)
        now += POLL
    return None, stream


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.json")))
@pytest.mark.parametrize("evidence", ["default", "learned"])
async def test_incident_traces(name: str, evidence: str, tmp_path: Path) -> None:
    trace = json.loads((TRACES / name).read_text())
    thresholds = Thresholds.default("r") if evidence == "default" else await learned(tmp_path)
    stale_at, stream = replay(trace, thresholds)
    if trace["expect"] == "alive":
        assert stale_at is None, f"{name}: a healthy turn called stale at t={stale_at}"
    else:
        last_part = max(e["t"] for e in trace["events"] if "part" in e)
        limit = last_part + thresholds.mid_stream.seconds + POLL
        assert stale_at is not None
        assert stale_at <= limit, f"{name}: stale at {stale_at}, later than {limit}"
    if "suspended" in trace:
        assert stream.suspended() == trace["suspended"]
        assert stream.stats().suspended == trace["suspended"]


async def test_learned_thresholds_follow_the_evidence(tmp_path: Path) -> None:
    thresholds = await learned(tmp_path)
    assert thresholds.mid_stream.source == "quantile"
    assert thresholds.mid_stream.seconds == pytest.approx(17.6 * 1.5, rel=0.01)
    assert thresholds.first_token.source == "quantile"


async def test_thresholds_are_never_below_the_evidence(tmp_path: Path) -> None:
    async with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        assert await ledger.thresholds("r") == Thresholds.default("r")
        await ledger.record(TurnStats("r", 1.0, 250.0, 9, "completed", 0.0))
        few = await ledger.thresholds("r")
        assert few.mid_stream == Threshold(375.0, "max_gap", 1)  # 250 x 1.5 beats 300
        assert few.first_token == Threshold(300.0, "default", 1)
        for _ in range(19):
            await ledger.record(TurnStats("r", 1.0, 10.0, 9, "completed", 0.0))
        await ledger.record(TurnStats("r", None, 9999.0, 3, "stale", 0.0))  # never evidence
        await ledger.record(TurnStats("other", 1.0, 1.0, 3, "completed", 0.0))
        many = await ledger.thresholds("r")
        assert many.mid_stream.samples == 20
        # the 99.9th percentile times 1.5 of (19 x 10, 250) is below 250: the gap wins
        assert many.mid_stream.seconds >= 250.0
        assert len(await ledger.turns("r")) == 21


def test_a_turn_records_its_figures() -> None:
    clock = ManualClock()
    stream = StreamClock("r", clock=clock)
    clock.advance(3)
    stream.mark("text")
    clock.advance(5)
    stream.mark("tool_open")
    clock.advance(500)
    stream.mark("tool_close")  # a tool's time is not a gap
    clock.advance(7)
    stream.mark("reasoning")
    clock.suspend(40)
    clock.advance(1)
    stream.mark("completed")
    assert stream.stats() == TurnStats("r", 3.0, 7.0, 5, "completed", 40.0)
    assert verdict(stream, Thresholds.default("r")) is ALIVE
    with pytest.raises(ValueError, match="unknown part kind 'token'"):
        stream.mark("token")


def test_watch_turn_catches_a_dead_turn_within_threshold_plus_one_poll() -> None:
    mock = trio.testing.MockClock(autojump_threshold=0)

    @attrs.define
    class TrioTime:
        def now(self) -> float:
            return trio.current_time()

        def suspended(self) -> float:
            return 0.0

    async def main() -> None:
        stream = StreamClock("r", clock=TrioTime())
        stream.mark("text")
        thresholds = Thresholds("r", Threshold(30, "max_gap"), Threshold(30, "max_gap"))
        seen: list[Stale] = []

        async def on_stale(found: Stale) -> None:
            seen.append(found)

        started = trio.current_time()
        found = await watch_turn(stream, thresholds, on_stale)
        assert isinstance(found, Stale)
        assert seen == [found]
        assert 30 < trio.current_time() - started <= 30 + POLL
        assert found.reason.startswith("no part for 31.0s mid-stream on route r")
        assert found.source == "max_gap"

        # a settled turn ends the watch alive; cancelling a watch is quiet
        done = StreamClock("r", clock=TrioTime())
        done.mark("completed")
        assert await watch_turn(done, thresholds, on_stale) is ALIVE
        with trio.move_on_after(5):
            await watch_turn(StreamClock("r", clock=TrioTime()), Thresholds.default("r"), on_stale)
        assert seen == [found]

    trio.run(main, clock=mock)


def test_salvage_keeps_text_and_files_with_limits_said(tmp_path: Path) -> None:
    review = tmp_path / "review.log"
    review.write_text("request_changes: " + "x" * 100)

    @attrs.frozen
    class Turn:
        route: str
        text: str
        artifacts: tuple[str, ...]

    turn = Turn("luna", "a" * 50 + "the verdict", (str(review), str(tmp_path / "gone.log")))
    kept = salvage(turn, "stale", text_limit=20, file_limit=16)
    assert kept.text == "aaaaaaaaathe verdict"
    assert kept.text_truncated
    found, missing = kept.files
    assert (found.excerpt, found.size, found.truncated) == ("request_changes:", 117, True)
    assert missing.error is not None
    assert "FileNotFoundError" in missing.error
    report = kept.describe().splitlines()
    assert report[0] == "salvaged from route luna (stale), its last 20 characters kept:"
    assert report[1] == "    aaaaaaaaathe verdict"
    assert report[2].endswith("review.log: 117 bytes, first 16 characters kept:")
    assert report[3] == "    request_changes:"
    assert report[4].startswith(f"file {tmp_path / 'gone.log'}: unavailable (FileNotFoundError")


def test_the_host_clock_counts_awake_time_and_no_suspension_here() -> None:
    clock = HostClock()
    before = clock.now()
    assert clock.now() >= before
    assert 0.0 <= clock.suspended() < 0.5  # nothing slept during this test
    stream = StreamClock("r")  # the host clock by default
    stream.mark("text")
    assert 0.0 <= stream.silence() < 0.5
