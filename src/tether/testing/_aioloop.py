"""Deadlocks in asyncio tests (issue 45): a loop whose every task waits while nothing can ever
wake it.

An asyncio loop runs again only when a callback is ready, a timer comes due, a descriptor it
watches is ready, a signal reaches a handler, or another thread calls into it. The watchdog
thread looks at each loop a test runs while that loop's thread sits in its selector: when none
of those can happen (no callback ready, no timer, no descriptor but the loop's own wake-up pipe,
no signal handler, no other live thread) for ``cushion`` seconds, its tasks wait forever. Then,
and only then, the test fails: every task of the loop is cancelled with the report as the
cancellation's message. The report names each task's line and what it waits on: a tether
channel with its queue and the holders of its senders (the line that made each, and the task
that made it, marked when that task is gone). Nothing is installed in the loop, and nothing
runs in it until a deadlock is proven; a miss (another thread alive, a plain signal handler)
leaves the test to its timeout, never a false alarm.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..inspect import _aiotasks
from ..inspect._render import line_of
from ._watchdog import WATCHDOG

_EVENTS: Any = sys.modules["asyncio.events"]
_SELECT_FILE = selectors.__file__


class LoopWatch:
    """Watches one running loop from the watchdog thread (see the module's docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cushion: float) -> None:
        self.loop = loop
        self.cushion = cushion
        self.step = max(0.05, min(0.25, cushion / 4))
        self._since: float | None = None
        self.report: str | None = None
        """The deadlock found, once one is (the test is failed with it)."""

    def tick(self) -> None:
        """One look; on a proven deadlock, fail the loop's tasks."""
        loop = self.loop
        if self.report is not None or loop.is_closed() or not loop.is_running():
            self._since = None
            return
        if not idle_forever(loop):
            self._since = None
            return
        now = time.monotonic()
        if self._since is None:
            self._since = now
        elif now - self._since >= self.cushion:
            self.report = report(loop, now - self._since)
            WATCHDOG.discard(self)
            loop.call_soon_threadsafe(_fail, loop, self.report)


def idle_forever(loop: Any) -> bool:
    """Whether the loop sits in its selector with nothing that could ever wake it. Read from
    another thread while that loop's thread is blocked, so nothing changes under the read."""
    frame = sys._current_frames().get(getattr(loop, "_thread_id", None) or -1)
    if frame is None or frame.f_code.co_filename != _SELECT_FILE:
        return False  # running a callback, or not a selector loop tether knows
    if loop._ready or any(not handle.cancelled() for handle in loop._scheduled):
        return False
    selector = getattr(loop, "_selector", None)
    wake = getattr(getattr(loop, "_ssock", None), "fileno", lambda: -1)()
    if selector is None or any(key.fd != wake for key in selector.get_map().values()):
        return False
    if getattr(loop, "_signal_handlers", None) or _python_handlers():
        return False
    mine = {loop._thread_id, WATCHDOG.ident}
    if any(t.ident not in mine and t.is_alive() for t in threading.enumerate()):
        return False
    return bool(asyncio.all_tasks(loop))


def _python_handlers() -> bool:
    """Whether a Python signal handler is in place (but SIGINT's, which ``asyncio.run`` sets
    to interrupt its main task: a person's Ctrl-C, not a wake-up the test waits for); it
    could call into the loop."""
    for signo in signal.valid_signals():
        handler = signal.getsignal(signo)
        if signo != signal.SIGINT and callable(handler):
            return True
    return False


def report(loop: asyncio.AbstractEventLoop, waited: float) -> str:
    """Every task of the loop: where it waits and on what, channels with their holders."""
    tasks = sorted(asyncio.all_tasks(loop), key=lambda task: task.get_name())
    live = {task.get_name() for task in tasks}
    lines = [
        f"tether: deadlock: every task of the asyncio loop has waited {waited:.1f} s, and"
        " nothing can wake them (no callback ready, no timer, no descriptor, no signal"
        " handler, no other thread)"
    ]
    for task in tasks:
        row = _aiotasks.row(task, None)
        wait = row["wait"]
        lines.append(f"  task {row['name']!r} waits {line_of(row)} on {wait['on']}")
        for holder in wait.get("holders", ()):
            gone = "" if holder["task"] in live else ", now ended"
            lines.append(
                f"    a sender {holder['name']!r} made at {holder['site']}"
                f" (by task {holder['task']!r}{gone}) keeps it open"
            )
    return "\n".join(lines)


def _fail(loop: asyncio.AbstractEventLoop, text: str) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel(text)


@contextlib.contextmanager
def watching_loops(cushion: float) -> Iterator[list[LoopWatch]]:
    """Watch every asyncio loop that starts running meanwhile in this thread (``asyncio.run``,
    anyio's runner, pytest-asyncio); the watches made."""
    original = _EVENTS._set_running_loop
    watches: list[LoopWatch] = []

    def set_running_loop(loop: asyncio.AbstractEventLoop | None) -> None:
        original(loop)
        if threading.current_thread() is not threading.main_thread():
            return  # another thread's loop: not watched, and not the end of ours
        if loop is not None:
            watch = LoopWatch(loop, cushion)
            watches.append(watch)
            WATCHDOG.add(watch)
        else:
            for watch in watches:
                WATCHDOG.discard(watch)

    _EVENTS._set_running_loop = set_running_loop
    try:
        yield watches
    finally:
        _EVENTS._set_running_loop = original
        for watch in watches:
            WATCHDOG.discard(watch)
