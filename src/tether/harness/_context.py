"""``HarnessContext``: what the engine gets besides its commands."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from ..channels import Receiver, WeakSender
from ..journal import Transcript
from ..process import ChildGroup
from ..wire import Nudge, Prompt

logger = logging.getLogger("tether.harness")

Command = Prompt | Nudge
"""What the connection loop forwards to the engine."""
Engine = Callable[["Receiver[Command]", "HarnessContext"], Awaitable[None]]
"""A harness's engine: it reads commands until the channel closes."""
T = TypeVar("T")


@attrs.define(eq=False)
class HarnessContext:
    """The session, its epoch, its transcript and its child group, for one engine run."""

    session: str
    epoch: int
    transcript: Transcript
    children: ChildGroup
    """Child agents go here: they get SIGINT, then worse, when the harness exits."""
    requeue: WeakSender[Command]
    """A weak sender into the engine's own command channel (to queue follow-ups): weak, so it
    never keeps the channel open. Upgrading it and keeping the strong sender is the bug of
    incident 004; the harness then cancels the engine after grace and logs the holder."""
    shutdown_reason: str | None = None
    """Set by the harness before it cancels the engine: why, for the ``aborted`` results."""

    async def tool(self, name: str, args: dict[str, Any], fn: Callable[[], Awaitable[T]]) -> T:
        """Run a tool with its call and result in the transcript.

        The call is durable before ``fn`` runs; its result (``ok`` with what ``fn`` returned,
        ``error`` with the exception, or ``aborted`` if cancelled) is recorded after.

        Raises:
            JournalError: the call could not be made durable; ``fn`` did not run.
        """
        call = await self.transcript.tool_call(name, args)
        try:
            output = await fn()
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                reason = self.shutdown_reason or "cancelled while the tool ran"
                await self.transcript.tool_result(call.id, None, "aborted", reason=reason)
            raise
        except Exception as exc:
            with trio.CancelScope(shield=True):
                await self.transcript.tool_result(call.id, f"{type(exc).__name__}: {exc}", "error")
            raise
        await self.transcript.tool_result(call.id, _jsonable(output), "ok")
        return output


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    return repr(value)
