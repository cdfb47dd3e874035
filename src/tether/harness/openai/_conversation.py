"""The conversation the model is sent, rebuilt from the transcript every time: user and
assistant messages in order, each assistant message followed by its tool calls' results, and
a reply whose stream was cut as the text that arrived, marked cut.

The transcript is the only memory, so a harness that starts after a crash sends the model
exactly what the one before it would have: a call a death cut short is there with the result
the resumed transcript sealed it with (``interrupted: ...``), and the model continues the turn
knowing it (seed 000's fix). The ids the model gave its calls are not kept: each call goes
back under its transcript id, which any OpenAI-compatible server accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ...journal import Entry, Event, Message, ToolCall, ToolResult

OUTPUT_CHARS = 16 * 1024
"""Characters of each stream of a tool's output sent back to the model."""
SHELL = "shell"
"""The one tool the model is given."""
PARTIAL_REPLY = "partial_reply"
"""The event that keeps the text a cut stream had sent, and how much arrived."""
MODEL_ERROR = "model_error"
"""The transcript event recording a failed model request."""


def messages(entries: Iterable[Entry], system: str | None) -> list[dict[str, Any]]:
    """The chat messages for ``entries`` (events are not part of the conversation)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    group: _Group | None = None
    for entry in entries:
        if isinstance(entry, Message):
            if group is not None:
                out += group.messages()
                group = None
            if entry.role == "assistant":
                group = _Group(entry.content)
            elif entry.role in ("user", "system"):
                out.append({"role": entry.role, "content": entry.content})
        elif isinstance(entry, ToolCall):
            group = group if group is not None else _Group("")
            group.calls.append(entry)
        elif isinstance(entry, ToolResult) and group is not None:
            group.results[entry.call_id] = entry
        elif isinstance(entry, Event) and entry.kind == PARTIAL_REPLY and entry.data.get("text"):
            if group is not None:
                out += group.messages()
                group = None
            out.append({"role": "assistant", "content": cut_reply(entry.data)})
        elif isinstance(entry, Event) and entry.kind == MODEL_ERROR and _after_user(out, group):
            out.append({"role": "assistant", "content": no_reply(entry.data)})
    if group is not None:
        out += group.messages()
    return out


class _Group:
    """An assistant message and the tool calls it made, with their results."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.calls: list[ToolCall] = []
        self.results: dict[str, ToolResult] = {}

    def messages(self) -> list[dict[str, Any]]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if not self.calls:
            return [message] if self.content else []
        message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(arguments(call))}}
            for call in self.calls
        ]  # fmt: skip
        results = [
            {"role": "tool", "tool_call_id": call.id, "content": answer(self.results.get(call.id))}
            for call in self.calls
        ]
        return [message, *results]


def cut_reply(data: dict[str, Any]) -> str:
    """What the model is told it had said before its stream was cut: the text, and that it
    was cut, and why (never taken for a finished answer)."""
    return f"{data['text']}\n[this reply was cut off: {data.get('why') or 'the stream ended'}]"


def _after_user(out: list[dict[str, Any]], group: _Group | None) -> bool:
    """Whether the conversation so far ends with a user message (a failed request there gets
    an assistant message: never two user messages in a row)."""
    return group is None and bool(out) and out[-1]["role"] == "user"


def no_reply(data: dict[str, Any]) -> str:
    """What the model is told of a prompt its request failed on: that it gave no reply, and
    why (a strict chat template refuses two user messages in a row, and would refuse every
    later prompt of the session)."""
    status = f" {data['status']}" if data.get("status") else ""
    return f"[no reply: the model request failed ({data.get('failure', 'unknown')}{status})]"


def arguments(call: ToolCall) -> dict[str, Any]:
    """The arguments the model gave ``call``: ``{"command": ...}`` for a shell call."""
    argv = call.args.get("argv")
    shell = isinstance(argv, list) and len(argv) == 3 and argv[:2] == ["sh", "-c"]
    if call.name == SHELL and shell:
        return {"command": argv[2]}  # type: ignore[index]
    return call.args


def answer(result: ToolResult | None) -> str:
    """What the model is told a call returned: its code and output, or why it has none."""
    if result is None:
        return "[no result was recorded for this call]"
    text = _output(result.output)
    if result.status == "ok":
        return text
    why = f"[{result.status}: {result.reason}]" if result.reason else f"[{result.status}]"
    return f"{why}\n{text}" if text else why


def _output(output: Any) -> str:
    if isinstance(output, dict) and "code" in output:
        parts = [f"exit code {output['code']}"]
        for stream in ("stdout", "stderr"):
            data = str(output.get(stream) or "")
            if data:
                cut = "\n[cut]" if len(data) > OUTPUT_CHARS else ""
                parts.append(f"{stream}:\n{data[:OUTPUT_CHARS]}{cut}")
        return "\n".join(parts)
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output)[:OUTPUT_CHARS]
