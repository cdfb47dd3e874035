"""``Judge``: whether a harness's loop still answers, on evidence the daemon was not the late
one (ADR 0020).

Silence is measured on the daemon's awake clock, and so is the window a harness is given to
answer a ping: a window during which the daemon itself was stopped or ran late is stretched
by that time, whichever task noticed the stop first. A harness that is runnable but starved
of CPU (``/proc`` state ``R``) gets one more ``patience``.
"""

from __future__ import annotations

import logging

import attrs
import trio

from ._awake import AwakeClock
from ._model import Harness
from ._settings import Settings

logger = logging.getLogger("tether.agentd")


@attrs.define(eq=False)
class Judge:
    """Silence and answers of harnesses, for the watchdog and for ``start_agent`` alike."""

    settings: Settings
    clock: AwakeClock

    def silence(self, harness: Harness) -> float:
        """Awake seconds since the harness's last sign of life."""
        return self.clock.now() - harness.last_sign()

    def suspect(self, harness: Harness) -> bool:
        """Whether the watchdog should have it judged: silent for ``patience`` on its link,
        or live and unconnected that long."""
        if harness.attached:
            return self.silence(harness) > self.settings.patience
        return harness.awaiting_connection and self.silence(harness) > self.patience(harness)

    def patience(self, harness: Harness) -> float:
        """How long it may be silent: ``patience``, or, for one adopted after a restart that
        has not linked to this daemon yet, its first contact window (``Settings``)."""
        if harness.child is None and not harness.hello.is_set():
            return self.settings.first_contact(starting=harness.starting)
        return self.settings.patience

    async def healthy(self, harness: Harness) -> bool:
        """Whether it answers before its ``patience`` passes since its last sign of life, and
        at least a heartbeat from now (waiting for a reconnect meanwhile)."""
        window = max(self.patience(harness) - self.silence(harness), self.settings.heartbeat)
        return await self.answers(harness, window)

    async def answers(self, harness: Harness, window: float) -> bool:
        """Whether its loop answers a ping within ``window`` seconds of awake time, with the
        second chance the module describes. Bounded by ``window + patience`` of awake time."""
        if await self.clock.within(window, lambda: self._ping_until_answered(harness)):
            return True
        if harness.ref.state() == "R":
            logger.info(
                "harness pid %d is runnable but silent: giving it %.1fs more",
                harness.ref.pid,
                self.settings.patience,
            )
            patience = self.settings.patience
            return await self.clock.within(patience, lambda: self._ping_until_answered(harness))
        return False

    async def _ping_until_answered(self, harness: Harness) -> bool:
        while harness.usable:
            link = harness.link
            if link is None:
                await _unless_it_exits(harness, harness.linked)
            elif link.closed:
                await _unless_it_exits(harness, link.detached)
            elif await link.roundtrip():
                return True
        await trio.lowlevel.checkpoint()
        return False

    def why_phantom(self, harness: Harness) -> str:
        silence = self.silence(harness)
        if harness.link is not None:
            return (
                f"no pong for {silence:.1f}s ({self.settings.miss_limit} heartbeats and a"
                " confirming ping)"
            )
        if harness.starting and not harness.hello.is_set():
            return f"no hello for {silence:.1f}s since it was adopted while starting"
        return f"no connection for {silence:.1f}s"


async def _unless_it_exits(harness: Harness, event: trio.Event) -> None:
    """Wait for ``event``, or for the harness to exit (a dead harness never links again)."""
    async with trio.open_nursery() as nursery:

        async def exited() -> None:
            await harness.exited.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(exited)
        await event.wait()
        nursery.cancel_scope.cancel()
