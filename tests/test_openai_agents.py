"""Issue 45: an OpenAI Agents SDK agent (``openai-agents`` from PyPI, asyncio) as a tether
harness, ``examples/openai_agents_harness.py``, against the project's OpenAI-compatible fake
model on 127.0.0.1 and a fake agentd. SIGTERM while the agent's ``shell`` tool runs: exit 143,
the call sealed naming the signal's sender, the ``setsid`` grandchild gone, and a harness that
replaces it continues the session (the model is sent the cut call's result). Superseded while
the engine keeps a stray sender clone: exit 75 within the bound, the clone's line named.

Skipped when openai-agents is not installed (``pip install 'tether[thirdparty]'``); under
``TETHER_REQUIRE_THIRD_PARTY=1`` (CI) a missing SDK fails instead."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from helpers import (
    count_named,
    harness_env,
    lingering_killer,
    marked,
    third_party,
    unique_session,
    wait_until,
)
from test_doc_blocks import blocks
from test_harness import BOUND, GRACE, FakeAgentd, _entries, _exit_code, agentd, cleanup
from tether.harness import EXIT_SUPERSEDED
from tether.harness.openai._fake import FakeModel

third_party("agents", "thirdparty")

EXAMPLE = Path(__file__).parent.parent / "examples" / "openai_agents_harness.py"
LONG_CALL = "setsid sleep 600 & sleep 600"


def start(session: str, epoch: int, daemon: FakeAgentd, state: Path, model: FakeModel,
          **env: str) -> subprocess.Popen[str]:  # fmt: skip
    settings = {"TETHER_GRACE": str(GRACE), "TETHER_RECONNECT_FOR": "1.0",
                "OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "test", **env}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE)],
        env=harness_env(session, epoch, daemon.path, state, **settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # two harnesses, the SDK imported by each: `make test-slow` and CI
async def test_sigterm_mid_shell_call_seals_it_and_the_next_harness_continues(
    tmp_path: Path,
) -> None:
    session = unique_session()
    transcript = tmp_path / f"{session}.jsonl"
    model = FakeModel([[("call", LONG_CALL)], [("text", "carrying on")]])
    async with trio.open_nursery() as nursery:
        await nursery.start(model.serve)
        async with agentd(5) as (daemon, _):
            harness = start(session, 5, daemon, tmp_path, model)
            async with cleanup(harness, session):
                await wait_until(lambda: count_named(session, "sleep") == 2, timeout=30)
                killer = lingering_killer("TERM", harness.pid)
                try:
                    code, log, took = await _exit_code(harness)
                finally:
                    killer.communicate("\n", timeout=10)
        assert code == 128 + signal.SIGTERM, log
        assert took <= BOUND
        assert marked(session) == [], "the shell call's tree (its setsid sleep) survived"
        (result,) = [e for e in _entries(transcript) if e["type"] == "tool_result"]
        assert result["status"] == "interrupted"
        assert f"SIGTERM from pid {killer.pid}, sh -c" in str(result["reason"])

        async with agentd(6) as (daemon, _):
            daemon.prompt_id = "p2"
            harness = start(session, 6, daemon, tmp_path, model)
            async with cleanup(harness, session):
                await wait_until(
                    lambda: any(e.get("content") == "carrying on" for e in _entries(transcript)),
                    timeout=30,
                )
                daemon.supersede.set()
                code, log, _ = await _exit_code(harness)
        nursery.cancel_scope.cancel()
    assert code == EXIT_SUPERSEDED, log
    resumed = model.requests[-1]["messages"]
    cut = [m for m in resumed if m.get("role") == "tool"]
    assert len(cut) == 1
    assert f"[interrupted] worker shut down mid-call (SIGTERM from pid {killer.pid}" in str(
        cut[0]["content"]
    )


@pytest.mark.slow
async def test_superseded_with_a_stray_clone_exits_75_in_time_naming_the_clone(
    tmp_path: Path,
) -> None:
    session = unique_session()
    model = FakeModel([[("call", LONG_CALL)]])
    async with trio.open_nursery() as nursery:
        await nursery.start(model.serve)
        async with agentd(3) as (daemon, _):
            harness = start(session, 3, daemon, tmp_path, model, TETHER_EXAMPLE_STRAY_CLONE="1")
            async with cleanup(harness, session):
                await wait_until(lambda: count_named(session, "sleep") == 2, timeout=30)
                daemon.supersede.set()
                code, log, took = await _exit_code(harness)
        nursery.cancel_scope.cancel()
    assert code == EXIT_SUPERSEDED, log
    assert took <= BOUND, f"took {took:.2f}s, bound {BOUND}s"
    last = log.strip().splitlines()[-1]
    assert "command channel still held by:" in last, log
    assert "openai_agents_harness.py:" in last, last
    assert marked(session) == []


def test_the_recipe_on_the_docs_page_is_the_example_s_code() -> None:
    """docs/openai-agents.md shows the example's code, line for line (the tests above run it)."""
    (recipe,) = [text for lang, text in blocks("docs/openai-agents.md") if lang == "python"]
    example = {line.strip() for line in EXAMPLE.read_text().splitlines()}
    missing = [line for line in recipe.splitlines() if line.strip() not in example]
    assert missing == []
