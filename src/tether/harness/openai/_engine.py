"""``OpenAIEngine``: for each prompt, stream chat completions from an OpenAI-compatible server
and run the ``shell`` calls it asks for, until the model stops.

Each request's conversation is rebuilt from the transcript (``_conversation``). Each chunk marks
the turn's stream clock, so agentd sees a silent stream as ``stalled`` and a slow one as alive.
The assistant's message (its text, and the calls it makes) is recorded once its stream ends;
each call is durable before it runs (``ctx.run_tool``). A failed request is one
``model_error`` event in the transcript, and the turn ends: the harness lives on. An engine
started after its predecessor died in a turn resumes that turn.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import attrs
import httpx
import trio

from ...channels import Receiver
from ...wire import Prompt
from .._context import Command, HarnessContext
from .._outcome import TURN_RESUMED
from ._conversation import MODEL_ERROR, PARTIAL_REPLY, SHELL, messages
from ._stream import ModelError, Reply, complete

logger = logging.getLogger("tether.harness.openai")

PARTIAL_WITHIN = 1.0
"""Seconds a stopping turn may take to record its partial reply (within the harness's grace)."""
RESUME = "resume"
"""The meta key of the prompt an engine requeues to resume a turn its predecessor's death cut."""
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": SHELL,
        "description": "Run a shell command (sh -c) and return its exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command"}},
            "required": ["command"],
        },
    },
}


@attrs.frozen
class ModelSettings:
    """Where the model is and how a turn runs."""

    base_url: str
    """The API's base URL (``http://127.0.0.1:8000/v1``); requests go to ``/chat/completions``."""
    model: str
    """The model's name, sent as ``model``."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer ...`` when set."""
    system: str | None = None
    """A system message put first in every conversation (not recorded)."""
    max_turns: int = 20
    """Model requests per prompt at most (each tool round trip is one more)."""
    tool_timeout: float | None = 600.0
    """Seconds a shell call may run (``None``: no bound but its stall threshold)."""
    stream_timeout: float = 600.0
    """Seconds without a byte from the server before a request fails (agentd's stall
    threshold, usually shorter, announces the silence first)."""


class OpenAIEngine:
    """An engine (``run_harness(OpenAIEngine(settings))``) for one OpenAI-compatible model."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        """Where the model is and how a turn runs."""
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        """Where each request goes."""
        self.headers = {"Accept": "text/event-stream"}
        """Each request's headers (with the API key, when there is one)."""
        if settings.api_key:
            self.headers["Authorization"] = f"Bearer {settings.api_key}"

    async def __call__(self, commands: Receiver[Command], ctx: HarnessContext) -> None:
        cut = ctx.interrupted
        if cut is not None and cut.prompt_id is not None:
            own = ctx.requeue.upgrade()  # the turn goes through the channel, so it is a turn
            if own is not None:
                own.try_send(Prompt(cut.prompt_id, cut.content, {RESUME: True}))
                own.close()
        timeout = httpx.Timeout(30.0, read=self.settings.stream_timeout)
        async with httpx.AsyncClient(timeout=timeout) as client:
            async for command in commands:
                if isinstance(command, Prompt):
                    await self.turn(client, command, ctx)

    async def turn(self, client: httpx.AsyncClient, prompt: Prompt, ctx: HarnessContext) -> None:
        """Answer one prompt (already recorded): model requests and shell calls until the
        model stops, ``max_turns`` is reached or a request fails."""
        if prompt.meta.get(RESUME):
            logger.info("resuming the turn of prompt %s", prompt.id)
            await ctx.transcript.event(TURN_RESUMED, {"prompt_id": prompt.id})
        for _ in range(self.settings.max_turns):
            clock = await ctx.stream(self.settings.model)
            payload = {
                "model": self.settings.model, "stream": True, "tools": [SHELL_TOOL],
                "messages": messages(ctx.transcript.entries, self.settings.system),
            }  # fmt: skip
            reply = Reply()
            try:
                await complete(client, self.url, payload, self.headers, clock, reply)
            except ModelError as exc:
                clock.mark("error")
                logger.warning("prompt %s: the model request failed: %s", prompt.id, exc)
                await _keep_partial(ctx, prompt, reply, str(exc))
                await ctx.fail_turn(prompt.id, **exc.record(), event=MODEL_ERROR)
                return
            except trio.Cancelled:  # the harness is stopping (a signal, Superseded, stop)
                with trio.CancelScope(shield=True), trio.move_on_after(PARTIAL_WITHIN):
                    await _keep_partial(ctx, prompt, reply, "the turn was cut mid-stream")
                raise
            clock.mark("completed")
            await ctx.transcript.append_message("assistant", reply.content)
            if not reply.calls:
                return
            for index in sorted(reply.calls):
                await self._call(ctx, reply, index)
        detail = f"the model was still calling tools after {self.settings.max_turns} requests"
        await ctx.fail_turn(prompt.id, "max_turns", detail=detail, event=MODEL_ERROR)

    async def _call(self, ctx: HarnessContext, reply: Reply, index: int) -> None:
        """Run one call of the reply: a ``shell`` call through ``ctx.run_tool``; anything else
        (another tool, arguments that are not JSON) is recorded as an ``error`` result."""
        call = reply.calls[index]
        command = _command(call.name, call.arguments)
        if isinstance(command, str):
            await ctx.run_tool(SHELL, ["sh", "-c", command], timeout=self.settings.tool_timeout)
            return
        (why,) = command

        async def refuse() -> None:
            raise ValueError(why)

        with contextlib.suppress(ValueError):  # recorded as the call's error result
            await ctx.tool(call.name or "(no name)", {"arguments": call.arguments}, refuse)


async def _keep_partial(ctx: HarnessContext, prompt: Prompt, reply: Reply, why: str) -> None:
    """Record what a cut stream had said (``partial_reply``: an event, so the conversation
    never replays it as the model's answer), with how much arrived; nothing if nothing did."""
    if not reply.chunks:
        return
    await ctx.transcript.event(PARTIAL_REPLY, {
        "prompt_id": prompt.id, "why": why, "chunks": reply.chunks,
        "chars": len(reply.content), "calls": len(reply.calls), "text": reply.content,
    })  # fmt: skip


def _command(name: str, arguments: str) -> str | list[str]:
    """The shell command of a call, or (a one-item list) why there is none."""
    if name != SHELL:
        return [f"no tool named {name!r}: the only tool is {SHELL!r}"]
    try:
        parsed: Any = json.loads(arguments or "{}")
    except ValueError:
        return [f"the arguments are not JSON: {arguments[:200]!r}"]
    command = parsed.get("command") if isinstance(parsed, dict) else None
    if not isinstance(command, str):
        return [f'{SHELL} takes {{"command": string}}, not {arguments[:200]!r}']
    return command
