"""``FakeModel``: a small OpenAI-compatible server on 127.0.0.1 for tests, benchmarks and the demo.

It speaks the real wire format (HTTP/1.1, ``POST .../chat/completions``, server-sent chat
completion chunks, ``data: [DONE]``) and answers each request with the next scripted reply:
text, reasoning, shell calls, pauses, a stall, a dropped connection, an HTTP error or a
malformed event. Every request's body is kept (``requests``), so a test can read what the
engine sent the model (after a resume, the interrupted call's result).
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import trio

Step = tuple[Any, ...]
"""One step of a reply: ``("text", str)``, ``("reasoning", str)``, ``("call", command)``,
``("sleep", seconds)``, ``("stall",)``, ``("drop",)``, ``("status", code)``, ``("garbage",)``,
``("raw", bytes)`` (sent as they are), ``("end",)`` (the stream ends cleanly, unfinished) or
``("chunks", n)`` (``n`` one-character text chunks, for benchmarks)."""
DEFAULT_REPLY: Sequence[Step] = (("text", "ok"),)
"""What a request past the script gets."""
_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class FakeModel:
    """Serve ``replies`` in order, one per request (then ``DEFAULT_REPLY``), at ``url``."""

    def __init__(self, replies: Iterable[Sequence[Step]] = (), model: str = "fake") -> None:
        self.replies: collections.deque[Sequence[Step]] = collections.deque(replies)
        """The replies not yet served, next first."""
        self.model = model
        """The model name its chunks carry."""
        self.requests: list[dict[str, Any]] = []
        """Each request's JSON body, in order."""
        self.port = 0
        """The port it listens on (0 until ``serve`` has started)."""
        self.served = trio.Event()
        """Set whenever a request has been read (replaced by a new one each time)."""

    @property
    def url(self) -> str:
        """The base URL to give an engine (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *steps: Step) -> None:
        """Queue one more reply."""
        self.replies.append(steps)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled (``await nursery.start(fake.serve)``)."""
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                body = await _read_request(stream)
            except (ValueError, TypeError, trio.BrokenResourceError):
                return
            if body is None:
                return
            self.requests.append(body)
            served, self.served = self.served, trio.Event()
            served.set()
            reply = self.replies.popleft() if self.replies else DEFAULT_REPLY
            # The client may go away (cancelled, or stopped on a stall).
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._reply(stream, reply)

    async def _reply(self, stream: trio.SocketStream, steps: Sequence[Step]) -> None:
        for step in steps:
            if step[0] == "status":
                code = int(step[1])
                text = json.dumps({"error": {"message": f"fake {code}", "code": code}}).encode()
                await stream.send_all(
                    f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\nContent-Type:"
                    f" application/json\r\nContent-Length: {len(text)}\r\nConnection: close\r\n"
                    f"\r\n".encode()
                    + text
                )
                return
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        await stream.send_all(head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        chunks = _Chunks(self.model)
        await _send(stream, chunks.event({"role": "assistant", "content": ""}))
        calls = 0
        for step in steps:
            kind = step[0]
            if kind == "text":
                for piece in _pieces(str(step[1])):
                    await _send(stream, chunks.event({"content": piece}))
            elif kind == "chunks":  # made at once and sent in large writes: a fast server
                event = chunks.event({"content": "x"})
                for start in range(0, int(step[1]), 512):
                    await _send(stream, event * min(512, int(step[1]) - start))
            elif kind == "reasoning":
                await _send(stream, chunks.event({"reasoning_content": str(step[1])}))
            elif kind == "call":
                for delta in _call(calls, str(step[1])):
                    await _send(stream, chunks.event({"tool_calls": [delta]}))
                calls += 1
            elif kind == "sleep":
                await trio.sleep(float(step[1]))
            elif kind == "stall":
                await trio.sleep(math.inf)
            elif kind == "drop":
                return  # closes the connection mid-stream
            elif kind == "garbage":
                await _send(stream, b"data: {not json\n\n")
            elif kind == "raw":
                await _send(stream, bytes(step[1]))
            elif kind == "end":  # the stream ends here, without a finish or [DONE]
                await stream.send_all(b"0\r\n\r\n")
                return
        finish = "tool_calls" if calls else "stop"
        await _send(stream, chunks.event({}, finish))
        await _send(stream, b"data: [DONE]\n\n")
        await stream.send_all(b"0\r\n\r\n")


class _Chunks:
    def __init__(self, model: str) -> None:
        self.model = model

    def event(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                 "model": self.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _pieces(text: str) -> list[str]:
    """Text as a model streams it: a few characters per chunk."""
    return [text[i : i + 4] for i in range(0, len(text), 4)] or [""]


def _call(index: int, command: str) -> list[dict[str, Any]]:
    arguments = json.dumps({"command": command})
    half = len(arguments) // 2
    return [
        {"index": index, "id": f"call_fake{index}", "type": "function",
         "function": {"name": "shell", "arguments": ""}},
        {"index": index, "function": {"arguments": arguments[:half]}},
        {"index": index, "function": {"arguments": arguments[half:]}},
    ]  # fmt: skip


async def _send(stream: trio.SocketStream, event: bytes) -> None:
    await stream.send_all(b"%x\r\n%s\r\n" % (len(event), event))


async def _read_request(stream: trio.SocketStream) -> dict[str, Any] | None:
    """The JSON body of one HTTP request (``None``: the client left first).

    Raises:
        ValueError: not an HTTP request with a JSON body.
        TypeError: a JSON body that is not an object.
    """
    data = b""
    while b"\r\n\r\n" not in data:
        more = await stream.receive_some(65536)
        if not more:
            return None
        data += more
        if len(data) > 1 << 20:
            raise ValueError("request head too large")
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        more = await stream.receive_some(65536)
        if not more:
            return None
        body += more
    parsed = json.loads(body[:length] or b"{}")
    if not isinstance(parsed, dict):
        raise TypeError("the body is not an object")
    return parsed
