"""``Tasks``, ``guarded`` and ``Throttle``: nothing a session's task meets may end the daemon.

Every task the daemon starts for one session (watching an exit, retiring a harness, judging
a phantom, redelivering a prompt) runs inside ``guarded``: an exception is logged with its
traceback and that task ends, while every other session goes on. A bug there is still a bug,
and says so at ERROR; but one session's bug, a full disk or a descriptor limit must not take
every harness down with the daemon. Cancellation passes through untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

logger = logging.getLogger("tether.agentd")


async def guarded(name: str, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
    """Run ``fn(*args)``; log and swallow any ``Exception`` it raises."""
    try:
        await fn(*args)
    except Exception:  # see the module's docstring
        logger.exception("agentd task %r failed; the daemon goes on", name)


class Tasks:
    """Where the daemon's background tasks run: its nursery while it runs, each ``guarded``."""

    def __init__(self) -> None:
        self.nursery: trio.Nursery | None = None

    def check(self) -> None:
        """Refuse to go on unless the daemon runs.

        Raises:
            RuntimeError: it does not.
        """
        if self.nursery is None:
            raise RuntimeError("the daemon is not running: use `async with agentd.running()`")

    def start(self, fn: Callable[..., Awaitable[object]], *args: Any, name: str) -> None:
        """Start ``fn(*args)`` guarded: whatever it raises ends it alone.

        Raises:
            RuntimeError: the daemon is not running.
        """
        self.check()
        assert self.nursery is not None
        self.nursery.start_soon(guarded, name, fn, *args, name=name)


class Throttle:
    """Say a repeated complaint once per ``every`` seconds, with how many were held back."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -self.every) < self.every:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        suffix = f" ({held} more like it in the last {self.every:g}s)" if held else ""
        logger.warning(message + suffix, *args)
