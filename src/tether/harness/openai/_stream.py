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

DONE = "[DONE]"
"""The data of the event that ends an OpenAI stream."""
DRAIN = 1 << 20
"""Bytes read past ``[DONE]`` or a refused event before the stream is left unfinished."""
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
        choices = chunk.get("choices")
        if type(choices) is not list or not choices:
            self._odd(chunk, clock)
            return
        choice = choices[0]
        delta = choice.get("delta")
        if type(delta) is not dict:
            if delta is not None:
                what = repr(delta)[:300]
                raise ModelError(Failure.MALFORMED, f"a delta that is not an object: {what}")
            delta = {}
        content = delta.get("content")
        if content:
            self.text.append(content if type(content) is str else str(content))
            clock.mark("text")
        elif delta.get("reasoning_content") or delta.get("reasoning"):
            self.reasoning += 1
            clock.mark("reasoning")
        else:
            clock.mark("text")
        calls = delta.get("tool_calls")
        if calls:
            for call in calls:
                self._call(call)
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = str(finish)

    def _odd(self, chunk: dict[str, Any], clock: StreamClock) -> None:
        """A chunk with no choice: a usage chunk is progress; an error or anything else is
        not a completion.

        Raises:
            ModelError: the server sent an error, or not a chunk.
        """
        if "error" in chunk:
            error = repr(chunk["error"])[:300]
            raise ModelError(Failure.MALFORMED, f"the server sent an error: {error}")
        if chunk.get("choices") != []:
            raise ModelError(Failure.MALFORMED, f"a chunk without choices: {chunk!r:.300}")
        clock.mark("text")

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
    reply: Reply | None = None,
) -> Reply:
    """POST ``payload`` to ``url`` with ``"stream": true`` and add up the reply (into
    ``reply`` if given, so a caller still has what arrived when the stream is cut).

    Raises:
        ModelError: the request or the stream failed (``failure`` says how).
    """
    reply = Reply() if reply is None else reply
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
    """Add every server-sent event of ``response`` to ``reply``; whether ``[DONE]`` came.

    An event is its ``data:`` lines (joined by newlines) up to a blank line; ``event:``,
    ``id:``, ``retry:`` and ``:`` comments (keep-alives) carry nothing a completion needs, and
    a keep-alive is no sign of the model: only chunks mark the clock. Parsed inline, as the
    hot path of every token. The body is read to its end even after ``[DONE]`` or a refused
    event (up to ``DRAIN`` bytes more): httpx's nested iterators are only finished by their end.

    Raises:
        ModelError: an event is not a completion chunk.
    """
    pending: str | None = None
    loads = json.loads
    add = reply.add
    done = False
    refused: ModelError | None = None
    lines = response.aiter_lines()
    async for line in lines:
        if line:
            if line.startswith("data: "):
                value = line[6:]
            elif line.startswith("data:"):
                value = line[5:]
            else:
                continue
            pending = value if pending is None else f"{pending}\n{value}"
            continue
        if pending is None:
            continue
        data, pending = pending, None
        if data == DONE:
            done = True
            break
        try:
            chunk = loads(data)
        except ValueError:
            refused = ModelError(Failure.MALFORMED, f"an event that is not JSON: {data[:300]!r}")
            break
        if type(chunk) is not dict:
            what = repr(data[:300])
            refused = ModelError(Failure.MALFORMED, f"an event that is not an object: {what}")
            break
        try:
            add(chunk, clock)
        except ModelError as exc:
            refused = exc
            break
    drained = 0
    async for line in lines:  # the rest, after [DONE] or a refused event: to the end
        drained += len(line) + 1
        if drained > DRAIN:
            break
    if refused is not None:
        raise refused
    if pending is not None and pending != DONE:
        raise ModelError(Failure.DROPPED, f"the stream ended inside an event: {pending[:300]!r}")
    return done or pending == DONE
