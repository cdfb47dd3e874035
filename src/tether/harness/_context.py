"""``HarnessContext``: what the engine gets besides its commands."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs

from ..channels import Receiver, WeakSender
from ..journal import Message, Transcript
from ..liveness import Ledger, StreamClock, Thresholds
from ..process import ChildGroup, RunResult
from ..wire import Nudge, Prompt
from ._outcome import TURN_FAILED
from ._tools import Tools
from ._turns import Turns

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
    """The session's name (``TETHER_SESSION``)."""
    epoch: int
    """This harness's epoch: a newer one supersedes it."""
    transcript: Transcript
    """The session's transcript, resumed: dangling calls sealed, appends durable."""
    children: ChildGroup
    """Child agents go here: they get SIGINT, then worse, when the harness exits."""
    requeue: WeakSender[Command]
    """A weak sender into the engine's own command channel (to queue follow-ups): weak, so it
    never keeps the channel open. Upgrading it and keeping the strong sender is the bug of
    incident 004; the harness then cancels the engine after grace and logs the holder."""
    shutdown_reason: str | None = None
    """Set by the harness before it cancels the engine: why, for the ``interrupted`` results."""

    ledger: Ledger | None = None
    """Where tool runs' silences are kept, so each tool's stall threshold comes from evidence."""
    interrupted: Message | None = None
    """The recorded prompt whose turn an earlier harness's death cut short (its end is sealed
    ``turn_aborted`` in the transcript, its open calls ``aborted``): resume it, or not. It
    is never delivered again (ADR 0034)."""
    tools: Tools = attrs.field(init=False)
    """The tool calls: ``tools.open`` has each running call and its silence."""

    turns: Turns = attrs.field(init=False)
    """What the engine is doing, for the daemon's pongs (``idle``, ``turn``, ``tool``)."""

    def __attrs_post_init__(self) -> None:
        reason = lambda: self.shutdown_reason  # noqa: E731 - read when a call is cut short
        self.tools = Tools(self.transcript, self.children, self.ledger, reason)
        self.turns = Turns(self.transcript, self.tools)

    async def stream(self, route: str) -> StreamClock:
        """A ``StreamClock`` for one model stream of this turn on ``route``: every part marked
        on it is progress of the turn, its thresholds come from the ledger, and its figures
        go to the ledger once the turn is over."""
        await self.record_streams()
        thresholds = Thresholds.default(route)
        if self.ledger is not None:
            try:
                thresholds = await self.ledger.thresholds(route)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("route %s: no thresholds from the ledger (%s)", route, exc)
        clock = StreamClock(route)
        self.turns.add_stream(clock, thresholds)
        return clock

    async def record_streams(self) -> None:
        """Put the stream clocks of finished turns in the ledger (a refusal is logged)."""
        finished, self.turns.finished = self.turns.finished, []
        if self.ledger is None:
            return
        for clock in finished:
            try:
                await self.ledger.record(clock.stats())
            except (sqlite3.Error, OSError) as exc:
                logger.warning("route %s: the ledger refused a turn: %s", clock.route, exc)

    async def tool(
        self,
        name: str,
        args: dict[str, Any],
        fn: Callable[[], Awaitable[T]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the tool's own, recorded as its result
    ) -> T:
        """Run a Python tool with its call and result in the transcript.

        The call is durable before ``fn`` runs; its result (``ok`` with what ``fn`` returned,
        ``error`` with the exception, ``aborted`` if cancelled or after ``timeout`` seconds
        (``trio.TooSlowError`` is raised on trio, ``TimeoutError`` on asyncio),
        ``interrupted`` naming the cause if the harness's stop cut it short) is recorded after.
        ``fn`` marks its progress with ``ctx.progress()``.

        Raises:
            JournalError: the call could not be made durable; ``fn`` did not run.
        """
        return await self.tools.call(name, args, fn, timeout)

    async def run_tool(self, name: str, argv: Sequence[str], **run: Any) -> RunResult:
        """Run a program as tool ``name`` (``ChildGroup.run`` with ``run``'s keywords), its
        call durable first and its result after: ``ok`` with the code and the output (each
        stream cut at 64 KiB in the transcript, the whole of it in a file beside it),
        ``error``, ``aborted`` with the reason (a stall, naming its threshold and where that
        came from, or a timeout), or ``interrupted`` (the signal's sender, a supersession).
        ``stall_after`` defaults to the threshold the ledger's healthy runs of ``name`` justify
        (300 s without evidence).

        Raises:
            JournalError: the call could not be made durable; nothing ran.
            SpawnError: the program cannot be executed (recorded as ``error``).
            ToolFailed: with ``check=True``, a non-zero code, a timeout or a stall.
        """
        return await self.tools.run(name, argv, **run)

    async def fail_turn(
        self,
        prompt_id: str,
        failure: str,
        *,
        status: int = 0,
        detail: str = "",
        event: str = TURN_FAILED,
    ) -> None:
        """Record that the turn of ``prompt_id`` failed: ``failure`` a word for the kind
        (``http``, ``unreachable``...), ``status`` its code, ``detail`` a sentence. Once the
        turn ends, ``tether ps`` shows it, agentd emits ``turn_failed``, and ``tether send
        --wait-reply`` exits 1 with it (ADR 0051). ``event`` names the transcript event.

        Raises:
            JournalError: it could not be recorded.
        """
        record = {"prompt_id": prompt_id, "failure": failure, "status": status, "detail": detail}
        await self.transcript.event(event, record)

    def progress(self, note: str | None = None) -> None:
        """The Python tool this task runs (inside ``tool``), or else the turn, made
        progress."""
        if not self.tools.progress(note):
            self.turns.advance()
