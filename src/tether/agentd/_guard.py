"""``Tasks`` and ``guarded``: nothing a session's task meets may end the daemon.

Every task the daemon starts for one session (watching an exit, retiring a harness, judging
a phantom, redelivering a prompt) runs inside ``guarded``: an exception is logged with its
traceback and that task ends, while every other session goes on. A bug there is still a bug,
and says so at ERROR; but one session's bug, a full disk or a descriptor limit must not take
every harness down with the daemon. Cancellation passes through untouched.
"""

from __future__ import annotations

import logging
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
