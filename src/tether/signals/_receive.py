"""``receive(*signals)``: an async context manager that yields a channel of ``SignalEvent``."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from .. import _backend
from ..channels import ChannelClosed, Receiver, Sender, SendError, WouldBlock, channel
from . import _signalfd
from ._event import SignalEvent, logger, now, sender_cmdline


@asynccontextmanager
async def receive(*signals: int) -> AsyncIterator[Receiver[SignalEvent]]:
    """Receive ``signals`` as ``SignalEvent``s, each naming its sender, while the block runs;
    under trio or asyncio.

    On Linux the signals are blocked in this thread and read from a signalfd, which carries the
    sender's pid and uid; its command line is read from ``/proc`` at once, before it can exit.
    Enter this early, before other threads start: threads started later inherit the block, but a
    thread that was already running can take a signal itself, and that event (like every event
    on platforms without signalfd) has its sender fields ``None``, with a log line saying so.
    Every event is logged on the ``tether.signals`` logger as
    ``received SIGTERM from pid=N uid=N cmd=...``.

    On exit the previous mask is restored and signals that arrived but were not consumed are
    delivered again to the handlers that were in place before, as trio's own
    ``open_signal_receiver`` does.

    Children must not inherit the block: ``tether.ChildGroup`` starts every child with an empty
    mask and default dispositions; other spawners (``subprocess``, ``trio.run_process``) do not.

    Raises:
        ValueError: no signal was given.
        RuntimeError: not called from the main thread.

    Example:
        ```python
        async with tether.signals.receive(signal.SIGTERM, signal.SIGINT) as events:
            async for event in events:
                print(event.describe())
        ```
    """
    if not signals:
        raise ValueError("receive() needs at least one signal")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("tether.signals.receive() must run in the main thread")
    tx, rx = channel(SignalEvent, math.inf, name="signals")
    use_signalfd = sys.platform == "linux" and _signalfd.available()
    fd = previous = None
    spilled: list[int] = []  # read while the receiver was closed: delivered again on exit
    try:
        with anyio.open_signal_receiver(*map(signal.Signals, signals)) as handled:
            if use_signalfd:
                previous = _signalfd.block(signals)
                fd = _signalfd.open_signalfd(signals)
            else:
                logger.warning("sender unknown on this platform (%s)", sys.platform)
            async with _backend.task_group() as nursery:
                nursery.start_soon(_pump_handled, handled, tx.clone(), spilled, use_signalfd)
                if fd is not None:
                    nursery.start_soon(_pump_signalfd, fd, tx.clone(), spilled)
                tx.close()
                try:
                    yield rx
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        # The previous handlers are back; unblocking hands them what is pending in the kernel,
        # then what we read and nobody consumed is raised again for them.
        unread = list(dict.fromkeys([*_drain(rx), *spilled]))
        if previous is not None:
            _signalfd.restore(previous)
        for signo in unread:
            signal.raise_signal(signo)
        if fd is not None:
            os.close(fd)


async def _pump_signalfd(fd: int, events: Sender[SignalEvent], spilled: list[int]) -> None:
    with events:
        while True:
            await _backend.wait_readable(fd)
            for signo, pid, uid in _signalfd.read_siginfo(fd):
                event = SignalEvent(signo, pid, uid, sender_cmdline(pid), now())
                logger.info(event.describe())
                _deliver(events, event, spilled)


def _deliver(events: Sender[SignalEvent], event: SignalEvent, spilled: list[int]) -> None:
    try:
        events.try_send(event)
    except SendError:
        spilled.append(event.signo)


async def _pump_handled(
    handled: AsyncIterator[int],
    events: Sender[SignalEvent],
    spilled: list[int],
    use_signalfd: bool,
) -> None:
    why = (
        "delivered to a thread that does not block it"
        if use_signalfd
        else "this platform cannot tell"
    )
    with events:
        async for signo in handled:
            event = SignalEvent(int(signo), None, None, None, now())
            logger.warning("%s (%s)", event.describe(), why)
            _deliver(events, event, spilled)


def _drain(rx: Receiver[SignalEvent]) -> list[int]:
    """The signals read but not consumed, in arrival order."""
    unread: list[int] = []
    try:
        while True:
            unread.append(rx.try_recv().signo)
    except (WouldBlock, ChannelClosed):
        pass
    return unread
