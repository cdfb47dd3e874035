"""``run_harness``: one nursery owns the engine, the connection loop and the signal watcher,
inside the session's child group, and every way out is an exit with a documented code:

- agentd answers ``Superseded`` (75): the loop returns, dropping the last sender; child agents
  get SIGINT at once; the engine sees ``ChannelClosed``, or is cancelled after ``grace`` with
  the channel's holders logged.
- SIGTERM, SIGINT, SIGHUP (128 + signo): the sender is logged, the engine cancelled, dangling
  calls sealed "worker shut down mid-call (SIGTERM from pid N, cmd)".
- the engine returns (0); the engine raises (1, traceback logged, dangling calls sealed).
- agentd unreachable for ``reconnect_for`` seconds (69): the engine is cancelled, calls sealed.

In every case the child group is left, so every child tree is stopped and reaped. ADR 0009
explains the ownership: the command channel's only strong sender is moved into the loop.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import attrs
import trio

from .. import signals
from ..channels import ChannelClosed, Receiver, channel
from ..journal import Transcript
from ..process import ChildGroup
from ._context import Command, HarnessContext
from ._loop import Ending, LoopResult, connection_loop

logger = logging.getLogger("tether.harness")

Engine = Callable[[Receiver[Command], HarnessContext], Awaitable[None]]

EXIT_OK = 0
EXIT_ENGINE_FAILED = 1
EXIT_DAEMON_GONE = 69  # EX_UNAVAILABLE
EXIT_SUPERSEDED = 75  # EX_TEMPFAIL: the daemon may respawn the session fresh


@attrs.define
class _Cause:
    code: int
    text: str
    reason: str | None = None
    """For the ``aborted`` results of calls cut short, when the cause cuts them."""


def run_harness(
    engine: Engine,
    *,
    session: str | None = None,
    epoch: int | None = None,
    agentd: str | None = None,
    transcript: str | os.PathLike[str] | None = None,
    grace: float | None = None,
    reconnect_for: float | None = None,
) -> int:
    """Run ``engine`` as a harness until one cause ends it; the process's exit code.

    Each keyword defaults to what agentd sets for its harnesses: ``TETHER_SESSION``,
    ``TETHER_EPOCH``, ``TETHER_AGENTD`` (the socket), ``TETHER_STATE_DIR`` (the transcript is
    ``<state dir>/<session>.jsonl``), ``TETHER_GRACE`` (default 2 s) and
    ``TETHER_RECONNECT_FOR`` (default 10 s). Call it from the main thread before starting any
    other thread, so signals are read with their senders.

    Raises:
        ValueError: a setting is neither given nor in the environment.
    """
    session = session or _env("TETHER_SESSION")
    epoch = epoch if epoch is not None else int(_env("TETHER_EPOCH"))
    agentd = agentd or _env("TETHER_AGENTD")
    if transcript is None:
        transcript = os.path.join(_env("TETHER_STATE_DIR"), f"{session}.jsonl")
    if grace is None:
        grace = float(os.environ.get("TETHER_GRACE", "2.0"))
    if reconnect_for is None:
        reconnect_for = float(os.environ.get("TETHER_RECONNECT_FOR", "10.0"))
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
        )
    return trio.run(
        _harness, engine, session, epoch, agentd, os.fspath(transcript), grace, reconnect_for
    )


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"{name} is not set and was not passed to run_harness")
    return value


async def _harness(
    engine: Engine,
    session: str,
    epoch: int,
    agentd: str,
    path: str,
    grace: float,
    reconnect_for: float,
) -> int:
    # Signals first: every thread started after this (the transcript's, trio's) blocks them.
    async with signals.receive(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as events:
        async with (
            await Transcript.open(path, resume=True) as transcript,
            ChildGroup(session, epoch, grace) as children,
        ):
            await children.replace_twins()
            cause = await _supervise(
                engine,
                events,
                transcript,
                children,
                session,
                epoch,
                agentd,
                grace,
                reconnect_for,
            )
            if cause.reason is not None and transcript.dangling():
                with trio.CancelScope(shield=True):
                    await transcript.seal_dangling(cause.reason)
        # Leaving the group stopped and reaped every child tree. A signal that came after
        # the cause was decided is logged here, not delivered again to kill us on the way out.
        _log_late_signals(events, cause)
    logger.info("exiting %d: %s", cause.code, cause.text)
    return cause.code


def _log_late_signals(events: Receiver[signals.SignalEvent], cause: _Cause) -> None:
    while True:
        try:
            event = events.try_recv()
        except (trio.WouldBlock, ChannelClosed):
            return
        logger.info("%s while exiting (%s); ignored", event.describe(), cause.text)


async def _supervise(
    engine: Engine,
    events: Receiver[signals.SignalEvent],
    transcript: Transcript,
    children: ChildGroup,
    session: str,
    epoch: int,
    agentd: str,
    grace: float,
    reconnect_for: float,
) -> _Cause:
    tx, rx = channel(Command, math.inf, name=f"commands of {session}")
    ctx = HarnessContext(session, epoch, transcript, children, tx.downgrade())
    causes: list[_Cause] = []
    decided = trio.Event()
    engine_scope = trio.CancelScope()
    engine_done = trio.Event()
    loop_scope = trio.CancelScope()
    loop_done = trio.Event()

    def decide(cause: _Cause) -> None:
        if not causes:
            causes.append(cause)
            decided.set()

    async def run_engine() -> None:
        with engine_scope:
            try:
                await engine(rx, ctx)
            except Exception as exc:
                logger.exception("engine raised")
                decide(
                    _Cause(
                        EXIT_ENGINE_FAILED,
                        f"engine raised {exc!r}",
                        f"engine raised {type(exc).__name__}: {exc}",
                    )
                )
            else:
                decide(_Cause(EXIT_OK, "engine returned"))
        engine_done.set()

    async def run_loop() -> None:
        result: LoopResult | None = None
        with loop_scope:
            result = await connection_loop(
                tx.move(), session=session, epoch=epoch, agentd=agentd, reconnect_for=reconnect_for
            )
        loop_done.set()
        if result is None:  # cancelled: another cause came first
            return
        if result.ending is Ending.SUPERSEDED:
            decide(
                _Cause(
                    EXIT_SUPERSEDED,
                    f"superseded: epoch {epoch} < current epoch {result.current}",
                    f"harness superseded by epoch {result.current}",
                )
            )
        elif result.ending is Ending.DAEMON_GONE:
            decide(
                _Cause(
                    EXIT_DAEMON_GONE,
                    f"agentd unreachable for {reconnect_for:.1f}s",
                    "harness lost its daemon",
                )
            )

    async def watch_signals() -> None:
        event = await events.recv()  # later ones wait in the channel; see _log_late_signals
        cmd = " ".join(event.sender_cmdline or ("?",))
        who = f"pid {event.sender_pid}, {cmd}" if event.sender_pid is not None else "unknown sender"
        decide(
            _Cause(
                128 + event.signo,
                event.describe(),
                f"worker shut down mid-call ({event.name} from {who})",
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_engine, name="engine")
        nursery.start_soon(run_loop, name="connection loop")
        nursery.start_soon(watch_signals, name="signal watcher")
        await decided.wait()
        cause = causes[0]
        if cause.code == EXIT_SUPERSEDED:
            # Child agents get SIGINT now, while the engine drains its channel.
            nursery.start_soon(children.aclose, name="stop child agents")
            with trio.move_on_after(grace):
                await engine_done.wait()
            if not engine_done.is_set():
                logger.error(
                    "the engine did not see its channel close within %.1fs; still held by: %s",
                    grace,
                    _holders(rx) or "nobody",
                )
        # Stop the loop first: once its sender is closed, any holder left is a stray clone,
        # and the engine, still running, still holds it for the record.
        loop_scope.cancel()
        await loop_done.wait()
        stray = _holders(rx)
        ctx.shutdown_reason = cause.reason
        engine_scope.cancel()
        nursery.cancel_scope.cancel()
    if stray:
        cause.text += f"; command channel still held by: {stray}"
    return cause


def _holders(rx: Receiver[Command]) -> str:
    return "; ".join(f"{h.name} at {h.site} (task {h.task})" for h in rx.holders())
