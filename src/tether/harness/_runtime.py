"""``run_harness``: one nursery owns the engine, the connection loop and the signal watcher,
inside the session's child group, and every way out is an exit with a documented code:

- agentd answers ``Superseded`` (75): the loop returns, dropping the last sender; child agents
  get SIGINT at once; the engine sees ``ChannelClosed``, or is cancelled after ``grace`` with
  the channel's holders logged.
- SIGTERM, SIGINT, SIGHUP (128 + signo): the sender is logged, the engine cancelled, dangling
  calls sealed "worker shut down mid-call (SIGTERM from pid N, cmd)".
- the engine returns (0); the engine raises (1, traceback logged, dangling calls sealed).
- agentd unreachable for ``reconnect_for`` seconds (69): the engine is cancelled, calls sealed.
- a prompt cannot be recorded in the transcript (74): it never reaches the engine (ADR 0034).

In every case the child group is left, so every child tree is stopped and reaped. ADR 0009
explains the ownership: the command channel's only strong sender is moved into the loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator

import trio

from .. import _backend, signals
from ..channels import ChannelClosed, Receiver, WouldBlock
from ..journal import JournalError, Message, Transcript
from ..liveness import Ledger
from ..process import ChildGroup
from ._context import Engine
from ._inbox import last_turn, seal_turn
from ._supervisor import Cause, HarnessSettings, Supervisor

logger = logging.getLogger("tether.harness")

DIED_MID_TURN = "the harness running this turn died without recording why (SIGKILL, a crash)"


def run_harness(
    engine: Engine,
    *,
    session: str | None = None,
    epoch: int | None = None,
    agentd: str | None = None,
    transcript: str | os.PathLike[str] | None = None,
    grace: float | None = None,
    reconnect_for: float | None = None,
    ledger: str | os.PathLike[str] | None = None,
    backend: str = "trio",
) -> int:
    """Run ``engine`` as a harness until one cause ends it; the process's exit code.

    ``backend`` is the loop it runs on: ``"trio"`` (``trio.run``) or ``"asyncio"``
    (``asyncio.run``, for an engine written against asyncio or anyio); everything else is the
    same, exit codes included.

    Each keyword defaults to what agentd sets for its harnesses: ``TETHER_SESSION``,
    ``TETHER_EPOCH``, ``TETHER_AGENTD`` (the socket), ``TETHER_STATE_DIR`` (the transcript is
    ``<state dir>/<session>.jsonl``), ``TETHER_GRACE`` (default 2 s) and
    ``TETHER_RECONNECT_FOR`` (default 10 s, counted at the CPU share a runnable process gets,
    so a daemon slow to restart on a loaded host is waited for; at most 6 times it in wall
    time); ``ledger``, where tool runs are kept for their
    stall thresholds, to ``ledger.sqlite3`` beside the transcript. Call it from the main
    thread before starting any other thread, so signals are read with their senders.

    A setting neither given nor in the environment (the program was run by hand, not by
    agentd) is one line on stderr, naming how to run it, and exit code 64 (``EX_USAGE``).

    Raises:
        ValueError: ``backend`` is neither ``"trio"`` nor ``"asyncio"``.
    """
    loop = _backend.Backend(backend)
    try:
        session = session or _env("TETHER_SESSION")
        epoch = epoch if epoch is not None else int(_env("TETHER_EPOCH"))
        agentd = agentd or _env("TETHER_AGENTD")
        if transcript is None:
            transcript = os.path.join(_env("TETHER_STATE_DIR"), f"{session}.jsonl")
    except ValueError as exc:
        print(f"{exc}: {RUN_UNDER_AGENTD}", file=sys.stderr)
        return EX_USAGE
    if grace is None:
        grace = float(os.environ.get("TETHER_GRACE", "2.0"))
    if reconnect_for is None:
        reconnect_for = float(os.environ.get("TETHER_RECONNECT_FOR", "10.0"))
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
        )
    if ledger is None:
        ledger = os.path.join(os.path.dirname(os.fspath(transcript)) or ".", "ledger.sqlite3")
    settings = HarnessSettings(
        session, epoch, agentd, os.fspath(transcript), grace, reconnect_for, os.fspath(ledger)
    )
    if loop is _backend.Backend.ASYNCIO:
        import asyncio

        return asyncio.run(_harness(engine, settings))
    return trio.run(_harness, engine, settings)


EX_USAGE = 64
EX_IOERR = 74
RUN_UNDER_AGENTD = (
    "a harness is started by tether agentd (tether agentd -- python harness.py, then"
    " tether start SESSION), or given every setting by its caller"
)


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"{name} is not set and was not passed to run_harness")
    return value


async def _harness(engine: Engine, settings: HarnessSettings) -> int:
    # Signals first: every thread started after this (the transcript's, trio's) blocks them.
    async with signals.receive(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as events:
        try:
            opened = await Transcript.open(settings.transcript, resume=True)
        except JournalError as exc:  # a directory in its place, a full disk, another writer
            print(f"tether harness: cannot open the transcript: {exc}", file=sys.stderr)
            return EX_IOERR
        async with (
            opened as transcript,
            _ledger(settings.ledger) as ledger,
            ChildGroup(settings.session, settings.epoch, settings.grace) as children,
        ):
            await children.replace_twins()
            interrupted = await _seal_cut_turn(transcript)
            supervisor = Supervisor(
                engine, events, transcript, children, settings, ledger, interrupted=interrupted
            )
            cause = await supervisor.run()
            reason = cause.reason
            if reason is not None and transcript.dangling():
                await _backend.shielded(lambda: transcript.seal_dangling(reason))
        # Leaving the group stopped and reaped every child tree. A signal that came after
        # the cause was decided is logged here, not delivered again to kill us on the way out.
        _log_late_signals(events, cause)
    logger.info("exiting %d: %s", cause.code, cause.text)
    return cause.code


async def _seal_cut_turn(transcript: Transcript) -> Message | None:
    """The prompt whose turn an earlier harness's death cut short, its end sealed
    ``turn_aborted`` here if that harness could not (SIGKILL, a crash)."""
    turn = last_turn(transcript)
    if turn is None:
        return None
    message, sealed = turn
    if not sealed:
        assert message.prompt_id is not None
        await seal_turn(transcript, message.prompt_id, DIED_MID_TURN)
    logger.warning("the turn of prompt %s was cut short by an earlier harness", message.prompt_id)
    return message


@contextlib.asynccontextmanager
async def _ledger(path: str | None) -> AsyncIterator[Ledger | None]:
    """The ledger, opened lazily: one that cannot be used costs the tools their evidence
    (logged when it is read), never the harness."""
    if path is None:
        yield None
        return
    ledger = Ledger(path)
    try:
        yield ledger
    finally:
        await _backend.shielded(ledger.aclose)


def _log_late_signals(events: Receiver[signals.SignalEvent], cause: Cause) -> None:
    while True:
        try:
            event = events.try_recv()
        except (WouldBlock, ChannelClosed):
            return
        logger.info("%s while exiting (%s); ignored", event.describe(), cause.text)
