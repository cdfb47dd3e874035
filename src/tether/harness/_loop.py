"""The connection loop: the harness's side of the wire, and the only holder of the sender.

It says ``Hello``; on ``Welcome`` it puts prompts in the engine's ``Inbox`` (whose pump, a task
of this loop, hands them to the engine), answers every ``Ping``, for a daemon of revision 3 or
later sends a ``Pong`` every heartbeat unasked (a beat, as a systemd service sends
``WATCHDOG=1``), and for one of revision 4 or later reports each prompt recorded
(``Recorded``), for one of revision 5 answers ``Inspect`` with a snapshot of the run
(``tether inspect``), and for one of revision 6 reports each turn's end (``TurnEnded``): all
from this loop, so only a live loop looks alive, and a stuck
engine is still inspected. On ``Superseded`` it
returns and its sender, the last one, closes the engine's channel. If the daemon goes away it
reconnects with backoff, and gives up after ``reconnect_for`` seconds without a welcome (a
daemon that accepts the connection only to refuse every hello counts as gone too).
"""

from __future__ import annotations

import enum
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import attrs
import psutil

from .. import _backend
from ..channels import ChannelClosed, Sender
from ..journal import JournalError
from ..wire import (
    Bye,
    Connection,
    Error,
    Hello,
    Inspect,
    Inspection,
    Nudge,
    Ping,
    Pong,
    Prompt,
    ProtocolError,
    Superseded,
    TurnEnded,
    Welcome,
    connect,
    encode,
)
from ..wire._control import RETRY_EVERY
from ._budget import FairBudget
from ._context import Command
from ._inbox import Inbox

logger = logging.getLogger("tether.harness")

ACTIVITY_REVISION = 2
"""The first wire revision whose daemon reads activity on pongs."""
BEAT_REVISION = 3
"""The first wire revision whose daemon wants a pong every heartbeat, unasked (a beat)."""
RECORD_REVISION = 4
"""The first wire revision whose daemon waits for ``Recorded`` (ADR 0034)."""
INSPECT_REVISION = 5
"""The first wire revision whose daemon may ask for an ``Inspection`` (ADR 0040)."""
TURN_REVISION = 6
"""The first wire revision whose daemon reads ``TurnEnded`` (ADR 0051)."""
REVISION = TURN_REVISION
"""The wire revision this harness speaks (in its ``Hello``)."""
MIN_BEAT = 0.01
"""Seconds between beats at the least, whatever heartbeat a daemon asks for."""


class Ending(enum.Enum):
    """Why the connection loop returned."""

    SUPERSEDED = "superseded"
    DAEMON_GONE = "daemon gone"
    ENGINE_GONE = "engine gone"
    TRANSCRIPT_FAILED = "transcript failed"


@attrs.define
class LoopResult:
    ending: Ending
    current: int | None = None
    """For ``SUPERSEDED``: the daemon's current epoch."""
    reason: str = ""
    """For ``SUPERSEDED``: why, when the daemon said (``stalled: ...``); for
    ``TRANSCRIPT_FAILED``: the journal's error."""

    def describe(self) -> str:
        """Why the engine's command channel closed: its ``ChannelClosed.reason``."""
        if self.ending is Ending.SUPERSEDED:
            said = f" ({self.reason})" if self.reason else ""
            return f"superseded by epoch {self.current}{said}"
        if self.ending is Ending.TRANSCRIPT_FAILED:
            return f"a prompt could not be recorded: {self.reason}"
        return str(self.ending.value)


async def connection_loop(
    commands: Sender[Command],
    *,
    inbox: Inbox,
    session: str,
    epoch: int,
    agentd: str,
    reconnect_for: float,
    report: Callable[[], dict[str, Any]] | None = None,
    inspect: Callable[[int], Inspection] | None = None,
) -> LoopResult:
    """Run until superseded, the daemon stays gone, the engine's channel closes or a prompt
    cannot be recorded; the sender is closed on return.

    ``report`` gives the activity fields of each ``Pong`` (ADR 0025), for a daemon that
    reads them (``Welcome.revision`` 2 or later); ``inspect(seq)`` answers an ``Inspect``
    (none: the harness says it cannot)."""
    me = psutil.Process(os.getpid())
    hello = Hello(session, epoch, me.pid, me.create_time(), REVISION)
    ending: list[LoopResult] = []
    try:
        async with _backend.task_group() as nursery:

            async def pump() -> None:
                try:
                    await inbox.pump(commands)
                    ending.append(LoopResult(Ending.ENGINE_GONE))
                except JournalError as exc:
                    logger.error("a prompt could not be recorded: %s", exc)  # noqa: TRY400
                    ending.append(LoopResult(Ending.TRANSCRIPT_FAILED, reason=str(exc)))
                nursery.cancel_scope.cancel()

            nursery.start_soon(pump, name="inbox pump")
            answers = _Answers(report, inspect)
            ending.append(await _reconnecting(hello, inbox, agentd, reconnect_for, answers))
            nursery.cancel_scope.cancel()
    finally:
        # The engine's ``recv`` says why its commands ended (ADR 0039).
        commands.close(reason=ending[0].describe() if ending else None)
    return ending[0]


async def _reconnecting(
    hello: Hello,
    inbox: Inbox,
    agentd: str,
    reconnect_for: float,
    answers: _Answers,
) -> LoopResult:
    budget = FairBudget(reconnect_for)
    delay = 0.05
    while True:
        connection = await _connect(agentd)
        if isinstance(connection, OSError):
            if budget.exhausted():
                logger.error(
                    "agentd at %s unreachable for %.1fs of fair CPU time (%.1fs on the clock): %s",
                    agentd, reconnect_for, budget.waited(), connection,
                )  # fmt: skip
                return LoopResult(Ending.DAEMON_GONE)
            await _backend.sleep(delay)
            delay = min(delay * 2, RETRY_EVERY)
            continue
        welcomed = _backend.event()
        async with connection:
            try:
                result = await _converse(connection, hello, inbox, welcomed, answers)
            except (ChannelClosed, ProtocolError) as exc:
                logger.warning("lost agentd: %s; reconnecting", exc)
                result = None
        if result is not None:
            return result
        if welcomed.is_set():  # a daemon that only refuses us is no daemon
            budget.restart()
            delay = 0.05
        elif budget.exhausted():
            logger.error(
                "agentd at %s has not welcomed this harness for %.1fs of fair CPU time"
                " (%.1fs on the clock)", agentd, reconnect_for, budget.waited(),
            )  # fmt: skip
            return LoopResult(Ending.DAEMON_GONE)
        else:
            await _backend.sleep(delay)
            delay = min(delay * 2, RETRY_EVERY)


@attrs.frozen
class _Answers:
    """What the loop answers for the rest of the harness: a pong's activity, an inspection."""

    report: Callable[[], dict[str, Any]] | None
    inspect: Callable[[int], Inspection] | None

    def inspection(self, seq: int) -> Inspection:
        if self.inspect is None:
            return Inspection(seq, {"error": "this harness was started without inspection"})
        return self.inspect(seq)


def _next_beat(every: float) -> float:
    """The loop's time of the next multiple of ``every`` on the host's monotonic clock: every
    harness of a host beats at the same instants, so the daemon reads their beats in one
    batch per heartbeat, as it reads the pongs of a round of pings (ADR 0028)."""
    now = time.monotonic()
    return _backend.current_time() + ((now // every + 1) * every - now)


async def _connect(agentd: str) -> Connection | OSError:
    try:
        return await connect(agentd)
    except OSError as exc:
        return exc


async def _converse(
    connection: Connection,
    hello: Hello,
    inbox: Inbox,
    welcomed: _backend.Event,
    answers: _Answers,
) -> LoopResult | None:
    """One connection, with a task reporting recorded prompts beside it once welcomed by a
    daemon that wants them.

    Raises:
        ChannelClosed, ProtocolError: the connection failed.
    """
    await connection.send(hello)
    sending = _backend.lock()
    async with _backend.task_group() as nursery:
        try:
            result: LoopResult | Exception | None = await _serve(
                connection, hello, inbox, welcomed, answers, sending, nursery
            )
        except (ChannelClosed, ProtocolError) as exc:
            result = exc
        nursery.cancel_scope.cancel()
    if isinstance(result, Exception):
        raise result
    return result


async def _serve(
    connection: Connection,
    hello: Hello,
    inbox: Inbox,
    welcomed: _backend.Event,
    answers: _Answers,
    sending: _backend.Lock,
    nursery: _backend.TaskGroup,
) -> LoopResult | None:
    reports = False
    every = next_beat = math.inf
    report = answers.report

    def pong(seq: int) -> Pong:
        return Pong(seq, **report()) if reports and report is not None else Pong(seq)

    while True:
        message = None
        with _backend.cancel_scope(
            deadline=next_beat
        ):  # receive is safe to cancel: it loses nothing
            message = await connection.receive()
        if message is None:  # this loop is alive: say so, unasked (ADR 0028)
            # Never wait to beat: a full socket is a daemon not reading (stopped, say), and
            # the beats already queued say all this one would; nor cut into a report.
            if not sending.locked():
                connection.send_nowait(encode(pong(0)))
            next_beat = _next_beat(every)
            await _backend.checkpoint()
            continue
        if isinstance(message, Welcome):
            welcomed.set()
            reports = report is not None and message.revision >= ACTIVITY_REVISION
            if message.revision >= BEAT_REVISION and message.heartbeat > 0:
                every = max(message.heartbeat, MIN_BEAT)
                next_beat = _next_beat(every)
            revision = min(message.revision, REVISION)
            if revision >= RECORD_REVISION:
                turns = revision >= TURN_REVISION
                nursery.start_soon(_report_recorded, connection, inbox, sending, turns)
            logger.info("welcomed by agentd: session %s epoch %d", message.session, message.epoch)
        elif isinstance(message, Superseded):
            logger.warning(
                "superseded: this harness holds epoch %d, the current epoch is %d",
                hello.epoch,
                message.current,
            )
            return LoopResult(Ending.SUPERSEDED, message.current, message.reason)
        elif isinstance(message, Ping):
            async with sending:
                await connection.send(pong(message.seq))
        elif isinstance(message, Inspect):
            async with sending:
                await connection.send(answers.inspection(message.seq))
        elif isinstance(message, Prompt | Nudge):
            inbox.put(message)  # never waits on the engine
        elif isinstance(message, Bye):
            logger.info("agentd said bye: %s", message.reason)
            return None
        elif isinstance(message, Error):
            logger.warning("agentd refused a frame: %s", message.reason)
            return None
        else:  # pragma: no cover - Hello/Pong are never sent to a harness
            logger.warning("unexpected %s from agentd", type(message).__name__)


async def _report_recorded(
    connection: Connection, inbox: Inbox, sending: _backend.Lock, turns: bool
) -> None:
    """Tell the daemon each prompt id recorded, as it is, and (``turns``: a daemon that reads
    them) each turn's end, the last few again first. Ids a broken connection loses are asked
    for again: the daemon sends those prompts anew, and ``Inbox.put`` reports them."""
    again = inbox.ended() if turns else []
    while True:
        reports = again or await inbox.reported()
        again = []
        async with sending:
            try:
                for report in reports:
                    if turns or not isinstance(report, TurnEnded):
                        await connection.send(report)
            except ChannelClosed:
                return  # the loop's receive sees the same end
