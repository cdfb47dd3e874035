"""``Tools``: the tool calls of one harness, each durable before it runs and answered after.

A call is written (and fsynced) before the tool starts; its result is ``ok``, ``error``,
``aborted`` with the reason the harness stopped it (a timeout, or a stall: "stalled after 312 s
without progress (threshold 300 s from default)"), or ``interrupted`` with what cut it short
from outside (the signal and its sender, a supersession, a lost daemon). A program tool runs through
``ChildGroup.run``, with its stall threshold from the ledger's healthy runs of that tool; a
Python tool marks its progress with ``progress()``. The silence of every open tool is readable
while it runs (``open``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import attrs
import trio

from .. import _backend
from ..journal import ToolCall, Transcript
from ..liveness import Ledger, Threshold
from ..process import (
    DEFAULT_STALL_AFTER,
    ChildGroup,
    OnStall,
    RunResult,
    ToolActivity,
    ToolFailed,
    ToolStall,
)

logger = logging.getLogger("tether.harness")
T = TypeVar("T")

OUTPUT_LIMIT = 64 * 1024
"""Bytes of each stream a result keeps in the transcript; the whole output goes to a file."""

_CURRENT: contextvars.ContextVar[ToolActivity | None] = contextvars.ContextVar(
    "tether tool", default=None
)


@attrs.define(eq=False)
class OpenTool:
    """A tool call still running: what it is and how long it has been silent."""

    call: ToolCall
    activity: ToolActivity
    stall_after: Threshold | None
    """Its stall threshold (``None`` for a Python tool: it is bounded by its timeout only)."""

    def silence(self) -> float:
        """Awake seconds it has been silent, as last observed (``observed_silence``)."""
        return self.activity.observed_silence()

    @property
    def stalled(self) -> bool:
        """Whether it has been silent past its threshold."""
        return self.stall_after is not None and self.silence() >= self.stall_after.seconds


class Tools:
    """Runs the tool calls of one harness against its transcript, group and ledger."""

    def __init__(
        self,
        transcript: Transcript,
        children: ChildGroup,
        ledger: Ledger | None,
        reason: Callable[[], str | None],
    ) -> None:
        self.transcript = transcript
        self.children = children
        self.ledger = ledger
        self._reason = reason
        self.open: dict[str, OpenTool] = {}
        """The calls running now, by call id."""

    def progress(self, note: str | None = None) -> bool:
        """The Python tool this task runs in made progress; whether it runs in one."""
        activity = _CURRENT.get()
        if activity is None:
            return False
        activity.advance(note)
        return True

    async def call(
        self,
        name: str,
        args: dict[str, Any],
        fn: Callable[[], Awaitable[T]],
        timeout: float | None,  # noqa: ASYNC109 - the tool's own, recorded as its result
    ) -> T:
        call = await self.transcript.tool_call(name, args)
        activity = ToolActivity()
        async with self._running(call, activity, None):
            token = _CURRENT.set(activity)
            try:
                limit = math.inf if timeout is None else timeout
                with _backend.move_on_after(limit) as scope:
                    output = await fn()
            finally:
                _CURRENT.reset(token)
        if scope.cancelled_caught:
            await self._answer(call, None, "aborted", f"timed out after {timeout:g} s")
            raise _too_slow()(f"tool {name} timed out after {timeout:g} s")
        await self.transcript.tool_result(call.id, _jsonable(output), "ok")
        return output

    async def run(self, name: str, argv: Sequence[str], **kwargs: Any) -> RunResult:
        check = bool(kwargs.pop("check", False))
        given = kwargs.pop("stall_after", None)
        call = await self.transcript.tool_call(name, {"argv": list(argv)})
        if given is not None:
            threshold = Threshold(float(given), "given")
        else:
            threshold = await self._threshold(name)
        stops = OnStall(kwargs.get("on_stall", OnStall.STOP)) is OnStall.STOP
        activity = ToolActivity()

        async def stalled(stall: ToolStall) -> None:
            data = {"call": call.id, "tool": name, "silence": round(stall.silence, 3),
                    "threshold": threshold.seconds, "source": threshold.source,
                    "waits": list(stall.waits)}  # fmt: skip
            await self.transcript.event("tool_stalled", data)

        async with self._running(call, activity, threshold):
            result = await self.children.run(
                argv, stall_after=threshold.seconds, activity=activity, stalled=stalled,
                name=name, **kwargs,
            )  # fmt: skip
        await self._record(call, name, result, threshold, stopped=stops and result.stalled)
        if check and result.failed:
            raise ToolFailed(result)
        return result

    async def _record(
        self, call: ToolCall, name: str, result: RunResult, threshold: Threshold, *, stopped: bool
    ) -> None:
        shutdown = self._reason()
        if result.status_lost:
            await self._answer(call, await self._output(call, result), "error", result.reason())
            return
        if result.timed_out:
            outcome, why = "timed_out", f"timed out after {result.timeout:g} s"
        elif shutdown is not None and result.returncode is not None and result.returncode < 0:
            outcome, why = "aborted", shutdown  # the harness's own stop ended it
        elif stopped:
            outcome, why = (
                "stalled",
                (
                    f"stalled after {result.max_silence:.0f} s without progress"
                    f" (threshold {threshold.seconds:g} s from {threshold.source})"
                ),
            )
        else:
            outcome, why = "ok", None
        if why is not None:
            status = "interrupted" if outcome == "aborted" else "aborted"
            await self._answer(call, await self._output(call, result), status, why)
        else:
            await self.transcript.tool_result(call.id, await self._output(call, result), "ok")
        if self.ledger is not None:
            try:
                await self.ledger.record_tool(name, result.max_silence, outcome)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("tool %s: the ledger refused its run: %s", name, exc)

    async def _threshold(self, name: str) -> Threshold:
        if self.ledger is not None:
            try:
                return await self.ledger.tool_threshold(name)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("tool %s: no threshold from the ledger (%s): default", name, exc)
        return Threshold(DEFAULT_STALL_AFTER, "default")

    async def _output(self, call: ToolCall, result: RunResult) -> dict[str, Any]:
        """The result's record: code, each stream (cut at ``OUTPUT_LIMIT``, the whole of it in
        a file beside the transcript), and who held the pipes."""
        record: dict[str, Any] = {"code": result.returncode}
        for stream, data in (("stdout", result.stdout), ("stderr", result.stderr)):
            record[stream] = data[:OUTPUT_LIMIT].decode(errors="replace")
            if len(data) > OUTPUT_LIMIT:
                path = f"{os.path.splitext(self.transcript.path)[0]}.outputs/{call.id}.{stream}"
                await anyio.to_thread.run_sync(_write, path, data)
                record[f"{stream}_truncated"] = {"bytes": len(data), "limit": OUTPUT_LIMIT,
                                                 "file": path}  # fmt: skip
        if result.holders:
            record["holders"] = [holder.describe() for holder in result.holders]
        if result.stalled:
            record["stalled"] = True
        if result.status_lost:
            record["status_lost"] = True
        return record

    @contextlib.asynccontextmanager
    async def _running(
        self, call: ToolCall, activity: ToolActivity, threshold: Threshold | None
    ) -> AsyncIterator[None]:
        """The call is open while the block runs; a block that fails answers the call first
        (``interrupted`` by the harness's stop, ``aborted`` if cancelled otherwise, ``error``
        if it raised), so no call is left unanswered."""
        self.open[call.id] = OpenTool(call, activity, threshold)
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, _backend.cancelled_class()):
                status = "aborted" if self._reason() is None else "interrupted"
                await self._answer(call, None, status, self._cancelled())
            elif isinstance(exc, Exception):
                await self._answer(call, f"{type(exc).__name__}: {exc}", "error")
            raise
        finally:
            self.open.pop(call.id, None)

    def _cancelled(self) -> str:
        return self._reason() or "cancelled while the tool ran"

    async def _answer(
        self, call: ToolCall, output: Any, status: str, reason: str | None = None
    ) -> None:
        await _backend.shielded(
            lambda: self.transcript.tool_result(call.id, output, status, reason=reason)
        )


def _too_slow() -> type[Exception]:
    """What a tool past its timeout raises: ``trio.TooSlowError`` on trio, ``TimeoutError``
    (asyncio's) on asyncio."""
    return trio.TooSlowError if _backend.on_trio() else TimeoutError


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    return repr(value)
