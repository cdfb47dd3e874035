"""``Supervisor``: the engine, the connection loop and the signal watcher of one harness run, in
one nursery, until the first of them decides how the harness ends (a ``Cause``).

On ``Superseded`` child agents get SIGINT at once while the engine drains its channel (it is
cancelled after ``grace``, the channel's holders logged); on any cause, the loop is stopped
first, so any holder of the command channel left after it is a stray clone, named in the exit
line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import trio

from .. import _backend, signals
from ..channels import Receiver, Sender, channel
from ..journal import JournalError, Message, Transcript
from ..liveness import Ledger
from ..process import ChildGroup
from ._context import Command, Engine, HarnessContext
from ._inbox import Inbox
from ._inspect import answer, register
from ._loop import Ending, connection_loop
from ._turns import Turns

logger = logging.getLogger("tether.harness")

EXIT_OK = 0
"""0: the engine returned, or the daemon said bye."""
EXIT_ENGINE_FAILED = 1
"""1: the engine raised."""
EXIT_DAEMON_GONE = 69  # EX_UNAVAILABLE
"""69 (EX_UNAVAILABLE): the daemon was unreachable for longer than ``TETHER_RECONNECT_FOR``."""
EXIT_TRANSCRIPT_FAILED = 74  # EX_IOERR: a prompt could not be recorded
"""74 (EX_IOERR): a prompt could not be recorded in the transcript."""
EXIT_SUPERSEDED = 75  # EX_TEMPFAIL: the daemon may respawn the session fresh
"""75 (EX_TEMPFAIL): another epoch is current; the daemon may respawn the session fresh."""


@attrs.frozen
class HarnessSettings:
    """Who this harness is and where its daemon is (from ``run_harness``)."""

    session: str
    epoch: int
    agentd: str
    transcript: str
    grace: float
    reconnect_for: float
    ledger: str | None = None
    """The ledger of tool runs (their stall thresholds); ``None``: none, defaults only."""


@attrs.define
class Cause:
    """How the harness ends: its exit code, a line for the log, and (when the cause cuts
    them short) the reason for the ``interrupted`` results of its open calls."""

    code: int
    text: str
    reason: str | None = None
    turn: str | None = None
    """The reason for the cut turn's seal where it differs from the calls' (a signal cuts a
    turn "mid-turn" whether or not a call was open)."""


@attrs.define(eq=False)
class Supervisor:
    """One run of ``engine`` under ``settings``; ``run`` returns the first cause."""

    engine: Engine
    events: Receiver[signals.SignalEvent]
    transcript: Transcript
    children: ChildGroup
    settings: HarnessSettings
    ledger: Ledger | None = None
    cause: Cause | None = None
    decided: _backend.Event = attrs.field(factory=_backend.event)
    engine_scope: _backend.Scope = attrs.field(factory=_backend.cancel_scope)
    engine_done: _backend.Event = attrs.field(factory=_backend.event)
    loop_scope: _backend.Scope = attrs.field(factory=_backend.cancel_scope)
    loop_done: _backend.Event = attrs.field(factory=_backend.event)
    interrupted: Message | None = None
    """The prompt whose turn a death cut short in an earlier run (sealed), for the engine."""

    def decide(self, cause: Cause) -> None:
        """The first cause wins; later ones are ignored."""
        if self.cause is None:
            self.cause = cause
            self.decided.set()

    async def run(self) -> Cause:
        settings = self.settings
        tx, rx = channel(Command, math.inf, name=f"commands of {settings.session}")
        ctx = HarnessContext(
            settings.session, settings.epoch, self.transcript, self.children, tx.downgrade(),
            ledger=self.ledger, interrupted=self.interrupted,
        )  # fmt: skip
        inbox = Inbox(self.transcript, self.interrupted.prompt_id if self.interrupted else None)
        rx.observe(_Both(ctx.turns, inbox))
        register(ctx.turns, ctx.tools, self.transcript)
        async with _backend.task_group() as nursery:
            nursery.start_soon(self._run_engine, rx, ctx, name="engine")
            nursery.start_soon(
                self._run_loop, tx.move(), inbox, ctx.turns.report, name="connection loop"
            )
            nursery.start_soon(self._watch_signals, name="signal watcher")
            await self.decided.wait()
            cause = self.cause
            assert cause is not None
            if cause.code == EXIT_SUPERSEDED:
                ctx.shutdown_reason = cause.reason  # a tool its stop ends is answered with it
                nursery.start_soon(self.children.aclose, name="stop child agents")
                with _backend.move_on_after(settings.grace):
                    await self.engine_done.wait()
                if not self.engine_done.is_set():
                    logger.error(
                        "the engine did not see its channel close within %.1fs; still held by: %s",
                        settings.grace,
                        holders(rx) or "nobody",
                    )
            # Stop the loop first: once its sender is closed, any holder left is a stray
            # clone, and the engine, still running, still holds it for the record.
            self.loop_scope.cancel()
            await self.loop_done.wait()
            stray = holders(rx)
            ctx.shutdown_reason = cause.reason
            self.engine_scope.cancel()
            nursery.cancel_scope.cancel()
        if stray:
            cause.text += f"; command channel still held by: {stray}"
        with _backend.cancel_scope(shield=True), _backend.move_on_after(settings.grace):
            ctx.turns.waiting()
            if cause.reason is not None:
                await _logged(inbox.seal(cause.turn or cause.reason))
            await ctx.record_streams()
        return cause

    async def _run_engine(self, rx: Receiver[Command], ctx: HarnessContext) -> None:
        with self.engine_scope:
            try:
                await self.engine(rx, ctx)
            except Exception as exc:
                logger.exception("engine raised")
                self.decide(
                    Cause(
                        EXIT_ENGINE_FAILED,
                        f"engine raised {exc!r}",
                        f"engine raised {type(exc).__name__}: {exc}",
                    )
                )
            else:
                self.decide(Cause(EXIT_OK, "engine returned"))
        self.engine_done.set()

    async def _run_loop(
        self, tx: Sender[Command], inbox: Inbox, report: Callable[[], dict[str, Any]]
    ) -> None:
        settings = self.settings
        result = None
        with self.loop_scope:
            result = await connection_loop(
                tx,
                inbox=inbox,
                session=settings.session,
                epoch=settings.epoch,
                agentd=settings.agentd,
                reconnect_for=settings.reconnect_for,
                report=report,
                inspect=answer,
            )
        self.loop_done.set()
        if result is None:  # cancelled: another cause came first
            return
        if result.ending is Ending.SUPERSEDED:
            why = f"harness superseded by epoch {result.current}"
            self.decide(
                Cause(
                    EXIT_SUPERSEDED,
                    f"superseded: epoch {settings.epoch} < current epoch {result.current}"
                    + (f" ({result.reason})" if result.reason else ""),
                    f"{result.reason} ({why})" if result.reason else why,
                )
            )
        elif result.ending is Ending.TRANSCRIPT_FAILED:
            self.decide(
                Cause(
                    EXIT_TRANSCRIPT_FAILED,
                    f"a prompt could not be recorded: {result.reason}",
                    "the harness could not record a prompt",
                )
            )
        elif result.ending is Ending.DAEMON_GONE:
            self.decide(
                Cause(
                    EXIT_DAEMON_GONE,
                    f"agentd unreachable for {settings.reconnect_for:.1f}s (of fair CPU share)",
                    "harness lost its daemon",
                )
            )

    async def _watch_signals(self) -> None:
        event = await self.events.recv()  # later ones wait in the channel; see run_harness
        cmd = " ".join(event.sender_cmdline or ("?",))
        who = f"pid {event.sender_pid}, {cmd}" if event.sender_pid is not None else "unknown sender"
        self.decide(
            Cause(
                128 + event.signo,
                event.describe(),
                f"worker shut down mid-call ({event.name} from {who})",
                f"worker shut down mid-turn ({event.name} from {who})",
            )
        )


@attrs.frozen
class _Both:
    """Observes the engine's receiver for its turns and for its inbox."""

    turns: Turns
    inbox: Inbox

    def waiting(self) -> None:
        self.turns.waiting()
        self.inbox.waiting()

    def took(self, item: Command) -> None:
        self.turns.took(item)
        self.inbox.took(item)


async def _logged(sealing: Awaitable[None]) -> None:
    """Seal the open turn; a transcript that refuses it only costs the seal (logged)."""
    try:
        await sealing
    except (JournalError, trio.ClosedResourceError, anyio.ClosedResourceError) as exc:
        logger.warning("the open turn could not be sealed: %s", exc)


def holders(rx: Receiver[Command]) -> str:
    return "; ".join(f"{h.name} at {h.site} (task {h.task})" for h in rx.holders())
