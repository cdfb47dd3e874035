"""Incident 000 on the real model protocol: ``python -m tether.harness.openai`` under a real
daemon, against an OpenAI-compatible server (``FakeModel``, streaming the real wire format on
127.0.0.1, as seed 000's MLX server did).

The model asks for a shell call that runs long; a separate process SIGTERMs the harness. Shown:
the call was durable before it ran, it is sealed ``interrupted`` naming the sender, the next
harness sends the model that result, and the model continues the turn (the prompt is recorded
once): seed 000's resumed session that never continued, continuing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import trio

from ..harness.openai._fake import FakeModel
from ..journal import Message, ToolCall, ToolResult
from ..process import find_twins, start
from ._demo_daemon import demo_agentd, show_events
from ._incident_000 import _entries, _until
from ._timeline import Timeline, Verdict

SESSION = "incident-000-model"
ANSWER = "The test run was interrupted (SIGTERM); I will run it again in smaller parts."


async def replay_model(log: Timeline, root: Path) -> list[Verdict]:
    """The scenario; its verdicts."""
    if importlib.util.find_spec("httpx") is None:
        return [Verdict("the model harness can run", False, "pip install 'tether[openai]'")]
    directory = root / "000-model"
    directory.mkdir(mode=0o700)
    transcript = directory / "sessions" / SESSION / f"{SESSION}.jsonl"
    fake = FakeModel([[("reasoning", "the suite is slow"), ("call", "sleep 600")],
                      [("text", ANSWER)]], model="mlx-community/qwen")  # fmt: skip
    async with trio.open_nursery() as server:
        await server.start(fake.serve)
        log.event("model", f"an OpenAI-compatible server streams on {fake.url}")
        argv = [sys.executable, "-m", "tether.harness.openai", "--base-url", fake.url,
                "--model", fake.model]  # fmt: skip
        async with demo_agentd(directory, argv) as agentd, trio.open_nursery() as nursery:
            nursery.start_soon(show_events, log, agentd.subscribe())
            first = await agentd.deliver(SESSION, "run the test suite")
            await _until(lambda: _tool_running(agentd.store_id, first.epoch),
                         "the model's shell call")  # fmt: skip
            calls = [e for e in _entries(transcript) if isinstance(e, ToolCall)]
            durable = len(calls) == 1 and not any(
                isinstance(e, ToolResult) for e in _entries(transcript)
            )
            log.event("transcript", "the model's call `sleep 600` is recorded; it runs")
            killer = await start(["sh", "-c", 'kill -TERM "$0"; sleep 600', str(first.pid)])
            log.event("operator", f"pid {killer.pid} (sh -c kill) sends SIGTERM to pid {first.pid}")
            await _until(lambda: agentd.status()[0].pid is None, "the harness's exit")
            await killer.stop(0.2)
            second = await agentd.start_agent(SESSION)
            await _until(lambda: _answered(transcript), "the model's answer")
            log.event("transcript", "the resumed model answered")
            nursery.cancel_scope.cancel()
        server.cancel_scope.cancel()
    sealed = [e for e in _entries(transcript) if isinstance(e, ToolResult)]
    told = fake.requests[1]["messages"][-1] if len(fake.requests) > 1 else {}
    prompts = [e for e in _entries(transcript) if isinstance(e, Message) and e.role == "user"]
    return [
        Verdict("the model's tool call is durable before it runs", durable,
                f"call at seq {calls[0].seq}, sleep 600 running" if calls else "no call"),
        Verdict(
            "the call is sealed interrupted, naming the SIGTERM's sender",
            len(sealed) == 1 and f"SIGTERM from pid {killer.pid}" in (sealed[0].reason or ""),
            sealed[0].status if sealed else "no result",
        ),
        Verdict(
            "the next harness sends the model the interrupted result",
            told.get("role") == "tool" and "[interrupted: " in str(told.get("content")),
            f"epoch {first.epoch} -> {second.epoch}, {len(fake.requests)} requests",
        ),
        Verdict("the model continues the turn, the prompt recorded once",
                _answered(transcript) and len(prompts) == 1, f"{len(prompts)} prompt recorded"),
    ]  # fmt: skip


def _tool_running(store: str | None, epoch: int) -> bool:
    """Whether the model's ``sleep 600`` runs in the harness's tree."""
    return any("sleep" in " ".join(ref.cmdline() or []).split()
               for ref in find_twins(SESSION, epoch=epoch, store=store))  # fmt: skip


def _answered(transcript: Path) -> bool:
    return any(isinstance(e, Message) and e.role == "assistant" and e.content == ANSWER
               for e in _entries(transcript))  # fmt: skip
