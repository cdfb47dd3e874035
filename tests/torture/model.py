"""The model campaign (issue 34): ``python -m tether.harness.openai`` under a real agentd against
``FakeModel`` serving random replies (text, reasoning, shell calls, pauses, 429s and 500s,
dropped streams, malformed events), while a seeded nemesis sends prompts and SIGKILLs,
SIGTERMs and SIGSTOPs the harness at random points. Once the faults stop, what must hold:

- ``once``: every prompt is recorded at most once, and each one is recorded or its delivery
  failed by name (exactly once at the engine, ADR 0034);
- ``answered``: every tool call in the transcript has a result;
- ``jsonl``: every line of the transcript parses as JSON (plain JSONL, ADR 0035);
- ``conversation``: every request the model got is a valid conversation (each assistant call
  answered by one tool message, right after it, and no tool message without its call);
- ``alive``: the harness ended only by the nemesis's signals, never by a model's fault.

``python tests/torture/model.py [--seed N] [--seeds K] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tether import Agentd, SqliteEpochStore
from tether.journal import Message, ToolCall, ToolResult, scan
from tether.testing import FakeModel

SESSION = "model"
EXPLAINED = {-signal.SIGKILL, -signal.SIGTERM, 128 + signal.SIGKILL, 128 + signal.SIGTERM,
             -signal.SIGINT, 128 + signal.SIGINT, 75}  # fmt: skip
"""Exit codes the nemesis explains: its SIGKILL and SIGTERM, and the daemon's replacing a
harness the nemesis stopped (SIGINT first, or ``Superseded``: 75)."""


def reply(rng: random.Random) -> list[tuple[Any, ...]]:
    """One random reply of the model."""
    kind = rng.choice(["text", "text", "reasoning", "call", "call", "slow_call", "pause",
                       "status", "drop", "garbage"])  # fmt: skip
    if kind == "text":
        return [("text", f"answer {rng.randrange(1000)}")]
    if kind == "reasoning":
        return [("reasoning", "hmm"), ("text", "thought it over")]
    if kind == "call":
        return [("text", "let me look"), ("call", f"echo {rng.randrange(1000)}")]
    if kind == "slow_call":
        return [("call", f"sleep {rng.choice([0.2, 0.5, 1.0])}")]
    if kind == "pause":
        return [("text", "wait"), ("sleep", rng.choice([0.1, 0.3])), ("text", " done")]
    if kind == "status":
        return [("status", rng.choice([429, 500, 503]))]
    if kind == "drop":
        return [("text", "half"), ("drop",)]
    return [("garbage",)]


def violations_of(transcript: Path, fake: FakeModel, queued: list[str], failed: set[str],
                  exits: list[int]) -> list[tuple[str, str]]:  # fmt: skip
    found: list[tuple[str, str]] = []
    raw = transcript.read_bytes() if transcript.exists() else b""
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            json.loads(line)
        except ValueError:
            found.append(("jsonl", f"line {number} is not JSON: {line[:80]!r}"))
    entries = list(scan(raw).entries)
    recorded = [e.prompt_id for e in entries if isinstance(e, Message) and e.prompt_id]
    for prompt_id in set(recorded):
        if recorded.count(prompt_id) > 1:
            found.append(("once", f"prompt {prompt_id} recorded {recorded.count(prompt_id)} times"))
    for prompt_id in queued:
        if prompt_id not in recorded and prompt_id not in failed:
            found.append(("once", f"prompt {prompt_id} neither recorded nor failed"))
    results = {e.call_id for e in entries if isinstance(e, ToolResult)}
    for call in (e for e in entries if isinstance(e, ToolCall)):
        if call.id not in results:
            found.append(("answered", f"call {call.id} ({call.args}) has no result"))
    for number, request in enumerate(fake.requests, 1):
        problem = _invalid(request.get("messages", []))
        if problem:
            found.append(("conversation", f"request {number}: {problem}"))
    for code in exits:
        if code not in EXPLAINED:
            found.append(("alive", f"the harness exited {code}, not by the nemesis"))
    return found


def _invalid(messages: list[dict[str, Any]]) -> str:
    """Why ``messages`` is not a valid chat conversation (``""``: it is)."""
    waiting: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if not waiting or message.get("tool_call_id") != waiting[0]:
                return f"a tool message for {message.get('tool_call_id')} out of place"
            waiting.pop(0)
            continue
        if waiting:
            return f"calls {waiting} not answered before a {role} message"
        if role == "assistant":
            waiting = [call["id"] for call in message.get("tool_calls") or ()]
    return f"calls {waiting} not answered" if waiting else ""


async def run(seed: int, seconds: float) -> tuple[int, list[tuple[str, str]]]:
    """One seeded run: ``(steps, violations)``."""
    rng = random.Random(seed)
    fake = FakeModel([reply(rng) for _ in range(2000)])
    queued: list[str] = []
    steps = 0
    with tempfile.TemporaryDirectory(prefix="tether-model-") as tmp:
        directory = Path(tmp)
        directory.chmod(0o700)
        async with trio.open_nursery() as nursery:
            await nursery.start(fake.serve)
            argv = [sys.executable, "-m", "tether.harness.openai", "--base-url", fake.url,
                    "--model", "fake", "--tool-timeout", "10"]  # fmt: skip
            async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
                agentd = Agentd(store, directory / "agentd.sock", argv, heartbeat=0.2,
                                grace=0.3, start_timeout=15.0, delivery_attempts=5,
                                restart_limit=(1000, 60.0))  # fmt: skip
                failed: set[str] = set()
                exits: list[int] = []
                # The nemesis's tasks end before the daemon and its store close: a start
                # left running would open the closed store again, and leak it.
                async with agentd.running(stop_harnesses=True), trio.open_nursery() as work:
                    work.start_soon(_watch, agentd.subscribe(100_000), failed, exits)
                    await agentd.start_agent(SESSION)
                    deadline = time.monotonic() + seconds
                    while time.monotonic() < deadline:
                        steps += 1
                        await _step(agentd, rng, queued, work)
                        await trio.sleep(rng.uniform(0.05, 0.4))
                    await _settle(agentd, directory, queued, failed)
                    work.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
        transcript = directory / "sessions" / SESSION / f"{SESSION}.jsonl"
        return steps, violations_of(transcript, fake, queued, failed, exits)


async def _step(agentd: Agentd, rng: random.Random, queued: list[str],
                nursery: trio.Nursery) -> None:  # fmt: skip
    action = rng.choice(["send", "send", "send", "kill", "term", "stop", "start"])
    pid = next((r.pid for r in agentd.status() if r.session == SESSION), None)
    if action == "send":
        queued.append((await agentd.deliver_later(SESSION, f"task {len(queued)}")).prompt_id)
    elif action == "start":
        nursery.start_soon(_quietly, agentd.start_agent, SESSION)
    elif pid is not None:
        with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
            if action == "stop":
                os.kill(pid, signal.SIGSTOP)
                try:
                    await trio.sleep(rng.uniform(0.1, 1.0))
                finally:
                    os.kill(pid, signal.SIGCONT)
            else:
                os.kill(pid, signal.SIGKILL if action == "kill" else signal.SIGTERM)


async def _quietly(fn: Any, *args: Any) -> None:
    with contextlib.suppress(Exception):  # a refused start is the nemesis's doing
        await fn(*args)


async def _settle(agentd: Agentd, directory: Path, queued: list[str], failed: set[str]) -> None:
    """With the faults over, let every queued prompt be recorded or fail, and the engine idle."""
    transcript = directory / "sessions" / SESSION / f"{SESSION}.jsonl"
    with trio.move_on_after(90):
        while True:
            await _quietly(agentd.start_agent, SESSION)
            raw = transcript.read_bytes() if transcript.exists() else b""
            recorded = {e.prompt_id for e in scan(raw).entries if isinstance(e, Message)}
            status = next((r for r in agentd.status() if r.session == SESSION), None)
            settled = all(p in recorded or p in failed for p in queued)
            if settled and status is not None and status.activity == "idle":
                return
            await trio.sleep(0.3)


async def _watch(events: Any, failed: set[str], exits: list[int]) -> None:
    """Prompts whose delivery failed, and every harness exit code, from the daemon's events."""
    async for event in events:
        if event.kind == "delivery_failed" and event.prompt_id:
            failed.add(event.prompt_id)
        elif event.kind == "exited" and event.code is not None:
            exits.append(event.code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else list(range(1, args.seeds + 1))
    bad = 0
    for seed in seeds:
        steps, found = trio.run(run, seed, args.seconds)
        print(f"seed {seed}: {steps} steps, {len(found)} violations")
        for name, detail in found[:20]:
            print(f"  {name}: {detail}")
        bad += bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
