"""One streamed chat completion on the OpenAI wire format: the request, each chunk's delta
added up (``Reply``: text, reasoning, tool calls by index, the finish reason), every chunk
marked on the turn's stream clock, and every way it can fail as one typed ``ModelError``."""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs
import httpx

from ...liveness import StreamClock
from ._sse import DONE, Events

ERROR_BODY = 2048
"""Bytes of an HTTP error's body kept for the record."""


class Failure(enum.Enum):
    """How a model request failed."""

    UNREACHABLE = "unreachable"
    """The server could not be connected to."""
    HTTP = "http"
    """It answered with an HTTP error status (429, 500...)."""
    DROPPED = "dropped"
    """The connection broke, or the stream ended before the model finished."""
    MALFORMED = "malformed"
    """An event was not a chat completion chunk (or the server sent an error event)."""
    TIMEOUT = "timeout"
    """Nothing came for the stream timeout."""


class ModelError(Exception):
    """A model request that failed: ``failure`` says how, ``status`` the HTTP status (0 if
    none), and the message the detail."""

    def __init__(self, failure: Failure, detail: str, status: int = 0) -> None:
        super().__init__(f"{failure.value}: {detail}" if not status else
                         f"{failure.value} {status}: {detail}")  # fmt: skip
        self.failure = failure
        """How it failed."""
        self.detail = detail
        """What the server or the connection said."""
        self.status = status
        """The HTTP status (0: none)."""

    def record(self) -> dict[str, Any]:
        """The transcript event's data."""
        return {"failure": self.failure.value, "status": self.status, "detail": self.detail}


@attrs.define
class ToolCallDelta:
    """One tool call of the reply, as its deltas add up."""

    id: str = ""
    name: str = ""
    arguments: str = ""


@attrs.define
class Reply:
    """What one streamed completion said, so far."""

    text: list[str] = attrs.field(factory=list)
    reasoning: int = 0
    """Reasoning parts streamed (their text is not kept)."""
    calls: dict[int, ToolCallDelta] = attrs.field(factory=dict)
    finish_reason: str | None = None
    chunks: int = 0

    @property
    def content(self) -> str:
        return "".join(self.text)

    def add(self, chunk: dict[str, Any], clock: StreamClock) -> None:
        """Add one chunk's delta and mark it on ``clock``.

        Raises:
            ModelError: the chunk is an error, or not a completion chunk.
        """
        self.chunks += 1
        if "error" in chunk:
            error = repr(chunk["error"])[:300]
            raise ModelError(Failure.MALFORMED, f"the server sent an error: {error}")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise ModelError(Failure.MALFORMED, f"a chunk without choices: {chunk!r:.300}")
        if not choices:  # a usage chunk
            clock.mark("text")
            return
        choice = choices[0]
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise ModelError(Failure.MALFORMED, f"a delta that is not an object: {delta!r:.300}")
        content = delta.get("content")
        if content:
            self.text.append(str(content))
        if delta.get("reasoning_content") or delta.get("reasoning"):
            self.reasoning += 1
            clock.mark("reasoning")
        else:
            clock.mark("text")
        for call in delta.get("tool_calls") or ():
            self._call(call)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def _call(self, call: Any) -> None:
        if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
            raise ModelError(Failure.MALFORMED, f"a tool call delta: {call!r:.300}")
        found = self.calls.setdefault(call.get("index", 0), ToolCallDelta())
        function = call.get("function") or {}
        found.id = found.id or str(call.get("id") or "")
        found.name += str(function.get("name") or "")
        found.arguments += str(function.get("arguments") or "")


async def complete(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    clock: StreamClock,
) -> Reply:
    """POST ``payload`` to ``url`` with ``"stream": true`` and add up the reply.

    Raises:
        ModelError: the request or the stream failed (``failure`` says how).
    """
    reply = Reply()
    try:
        async with client.stream("POST", url, json=payload, headers=headers) as response:
            if response.status_code >= 400:
                body = (await response.aread())[:ERROR_BODY].decode(errors="replace")
                raise ModelError(Failure.HTTP, body.strip() or response.reason_phrase,
                                 response.status_code)  # fmt: skip
            if await _read(response, reply, clock):
                return reply
    except httpx.TimeoutException as exc:
        raise ModelError(Failure.TIMEOUT, f"{type(exc).__name__}: {exc}") from None
    except httpx.ConnectError as exc:
        raise ModelError(Failure.UNREACHABLE, str(exc) or type(exc).__name__) from None
    except (httpx.TransportError, httpx.StreamError) as exc:
        raise ModelError(Failure.DROPPED, f"{type(exc).__name__}: {exc}") from None
    if reply.finish_reason is not None:
        return reply  # a server that does not send [DONE] after the last chunk
    raise ModelError(Failure.DROPPED, f"the stream ended after {reply.chunks} chunks, before"
                     " the model finished")  # fmt: skip


async def _read(response: httpx.Response, reply: Reply, clock: StreamClock) -> bool:
    """Add every event of ``response`` to ``reply``; whether ``[DONE]`` came."""
    events = Events()
    async for line in response.aiter_lines():
        data = events.line(line)
        if data is None:
            continue
        if data == DONE:
            return True
        _add(reply, data, clock)
    data = events.end()
    if data == DONE:
        return True
    if data is not None:
        _add(reply, data, clock)
    return False


def _add(reply: Reply, data: str, clock: StreamClock) -> None:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ModelError(Failure.MALFORMED, f"an event that is not JSON: {data[:300]!r}") from None
    if not isinstance(chunk, dict):
        raise ModelError(Failure.MALFORMED, f"an event that is not an object: {data[:300]!r}")
    reply.add(chunk, clock)
