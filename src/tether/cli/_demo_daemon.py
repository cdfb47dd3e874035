"""The demo's daemon: a real ``Agentd`` on a real socket and SQLite store in the run's
directory, starting the example harness, with its events on the timeline."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..agentd import Agentd, AgentEvent
from ..channels import Receiver
from ..epochs import SqliteEpochStore
from ..process import find_twins
from ._timeline import Timeline

EXAMPLE = [sys.executable, "-m", "tether.harness.example"]
HEARTBEAT, MISS, GRACE = 0.2, 3, 0.3


@asynccontextmanager
async def demo_agentd(
    directory: Path, argv: list[str] | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[Agentd]:
    """A running daemon whose harnesses get ``env`` on top of this process's environment;
    it stops every harness when the block exits."""
    harness_env = {
        **os.environ,
        "TETHER_EXAMPLE_SIGNAL_FILE": str(directory / "signals.txt"),
        "TETHER_EXAMPLE_WEDGE_FILE": str(directory / "wedge"),
        **(env or {}),
    }
    async with SqliteEpochStore(directory / "epochs.sqlite3") as store:
        agentd = Agentd(
            store,
            directory / "agentd.sock",
            argv or EXAMPLE,
            heartbeat=HEARTBEAT,
            miss_limit=MISS,
            grace=GRACE,
            env=harness_env,
            restart_limit=(2, 60.0),
            reap_orphans=True,  # the demo is the subreaper of everything it starts
        )
        async with agentd.running(stop_harnesses=True):
            yield agentd


async def show_events(log: Timeline, feed: Receiver[AgentEvent]) -> None:
    """Put every daemon event on the timeline."""
    async for event in feed:
        where = f"epoch {event.epoch} pid {event.pid}" if event.pid else ""
        log.event("agentd", f"{event.session}: {event.kind} {where} {event.detail}".rstrip())


def sleeper_running(agentd: Agentd, session: str, epoch: int) -> bool:
    """Whether the example agent of ``session``'s harness at ``epoch`` has started its
    ``setsid`` sleeper: it has its SIGINT handler in place by then."""
    for ref in find_twins(session, epoch=epoch, store=agentd.store_id):
        cmd = ref.cmdline()
        if cmd and os.path.basename(cmd[0]) == "sleep":
            return True
    return False
