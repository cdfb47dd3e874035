"""``tether run -- CMD ARGS...``: run a worker written in any language the way tether runs its
own children, like tini but naming every signal's sender and leaving nothing behind.

CMD starts in its own session under this process, which is a child subreaper; SIGINT, SIGTERM,
SIGHUP and SIGUSR1 are forwarded to it, each logged with its sender. When CMD exits, or
``grace`` seconds after a forwarded SIGTERM it has not obeyed, every remaining descendant
(``setsid`` and double-forked ones included) is stopped with tether's escalation (SIGINT,
SIGTERM, SIGKILL) and reaped. The exit status is CMD's (128 + signo if a signal ended it).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

import trio

from .. import signals
from ..process import ChildGroup, SpawnError

logger = logging.getLogger("tether.run")

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
EXIT_CANNOT_RUN = 127


def run(argv: Sequence[str], *, session: str | None, grace: float, log: str | None) -> int:
    """Run ``argv`` under tether; its exit status."""
    if log is not None:
        logging.basicConfig(
            level=logging.INFO, filename=log, format="%(asctime)s %(name)s %(message)s"
        )
    elif not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="tether run: %(name)s %(message)s"
        )
    return trio.run(_run, list(argv), session or f"run-{os.getpid()}", grace)


async def _run(argv: list[str], session: str, grace: float) -> int:
    # Signals first, before any thread: CMD starts with a clean mask and default dispositions.
    async with signals.receive(*FORWARDED) as events, ChildGroup(session, 1, grace) as group:
        try:
            child = await group.spawn(argv)
        except SpawnError as exc:
            logger.error("%s", exc)  # noqa: TRY400 - the reason is the message, not a trace
            return EXIT_CANNOT_RUN
        logger.info("started %s as pid %d (session %s)", " ".join(argv), child.pid, session)
        async with trio.open_nursery() as nursery:

            async def forward() -> None:
                async for event in events:
                    if child.send_signal(event.signo):
                        logger.info("forwarded %s to pid %d", event.name, child.pid)
                    if event.signo == signal.SIGTERM:
                        nursery.start_soon(stop_after_grace)

            async def stop_after_grace() -> None:
                await trio.sleep(grace)
                if child.returncode is None:
                    logger.warning(
                        "pid %d still runs %.1fs after SIGTERM: stopping its tree", child.pid, grace
                    )
                    await group.aclose()

            nursery.start_soon(forward)
            code = await child.wait()
            nursery.cancel_scope.cancel()
        left = group.members()
        if left:
            logger.info(
                "pid %d exited %d; stopping %d processes it left", child.pid, code, len(left)
            )
    status = code if code >= 0 else 128 - code
    logger.info("exiting %d", status)
    return status
