"""An OpenAI Agents SDK agent as a tether harness, under ``asyncio.run``.

``tether agentd -- python examples/openai_agents_harness.py`` (with ``pip install 'tether'
openai-agents``): each prompt agentd delivers is one ``Runner.run_streamed`` of an agent whose
``shell`` tool runs its command through ``ctx.run_tool``, so the command's whole process tree
(``setsid`` and ``nohup`` escapees too) belongs to the session and is stopped with it, a stall
is evidence, and the call is in the transcript before it runs and answered whatever ends it. The
model is the OpenAI-compatible server at ``$OPENAI_BASE_URL``. Each run's input is the session's
transcript, so a harness that replaces one SIGTERMed mid-call continues the conversation, the
cut call answered "interrupted" with the signal's sender. With ``TETHER_EXAMPLE_STRAY_CLONE=1``
the engine keeps a strong sender clone (seed 004's bug): the harness still exits when
superseded, and its log names the clone's line.
"""

from __future__ import annotations

import json
import os
from typing import Any

import agents
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI

import tether
from tether import HarnessContext, Receiver
from tether.harness import Command
from tether.journal import Message, ToolCall, ToolResult
from tether.wire import Prompt

agents.set_tracing_disabled(True)  # no traces sent to OpenAI's servers
MODEL = os.environ.get("MODEL", "fake")
"""The model's name; the server is ``$OPENAI_BASE_URL``, its key ``$OPENAI_API_KEY``."""


def history(ctx: HarnessContext) -> list[dict[str, Any]]:
    """The session so far as the SDK's input items: prompts, answers, shell calls and their
    results (a cut call's result says why it was cut)."""
    items: list[dict[str, Any]] = []
    for entry in ctx.transcript.entries:
        if isinstance(entry, Message) and entry.role in ("user", "assistant"):
            items.append({"role": entry.role, "content": entry.content})
        elif isinstance(entry, ToolCall) and entry.name == "shell":
            command = " ".join(entry.args.get("argv", [])[2:])
            items.append({"type": "function_call", "call_id": entry.id, "name": "shell",
                          "arguments": json.dumps({"command": command})})  # fmt: skip
        elif isinstance(entry, ToolResult) and any(
            item.get("call_id") == entry.call_id for item in items
        ):
            output = entry.reason if entry.status != "ok" else json.dumps(entry.output)
            items.append({"type": "function_call_output", "call_id": entry.call_id,
                          "output": f"[{entry.status}] {output}"})  # fmt: skip
    return items


def make_agent(ctx: HarnessContext) -> Agent:
    @function_tool
    async def shell(command: str) -> str:
        """Run a shell command; its exit code and output."""
        result = await ctx.run_tool("shell", ["bash", "-c", command], timeout=600)
        return f"exit {result.returncode}\n{result.stdout.decode(errors='replace')}"

    model = OpenAIChatCompletionsModel(MODEL, openai_client=AsyncOpenAI())
    return Agent(name="assistant", instructions="Use the shell tool.", tools=[shell], model=model)


async def engine(commands: Receiver[Command], ctx: HarnessContext) -> None:
    """Answer each prompt with one run of the agent over the session's history."""
    agent = make_agent(ctx)
    stray = ctx.requeue.upgrade() if os.environ.get("TETHER_EXAMPLE_STRAY_CLONE") else None
    async for command in commands:
        if isinstance(command, Prompt):
            run = Runner.run_streamed(agent, history(ctx))  # the transcript, as input items
            async for _ in run.stream_events():
                pass
            await ctx.transcript.append_message("assistant", str(run.final_output))
    del stray


if __name__ == "__main__":
    raise SystemExit(tether.run_harness(engine, backend="asyncio"))
