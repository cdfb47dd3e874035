"""``Judge``: whether a harness's loop still answers, on evidence the daemon was not the late
one (ADR 0020).

Silence is measured on the daemon's awake clock. A harness is given a window to answer a
ping; a window during which the daemon itself ran late is given again, twice at most, and a
harness that is runnable but starved of CPU (``/proc`` state ``R``) gets one more ``patience``.
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
        return harness.awaiting_connection and self.silence(harness) > self.settings.patience

    async def healthy(self, harness: Harness) -> bool:
        """Whether it answers before ``patience`` passes since its last sign of life, and at
        least a heartbeat from now (waiting for a reconnect meanwhile)."""
        window = max(self.settings.patience - self.silence(harness), self.settings.heartbeat)
        return await self.answers(harness, window)

    async def answers(self, harness: Harness, window: float) -> bool:
        """Whether its loop answers a ping within ``window``, with the second chances the
        module describes. Bounded by ``3 * window + patience``."""
        for _ in range(3):
            lag = self.clock.lag
            with trio.move_on_after(window):
                return await self._ping_until_answered(harness)
            if self.clock.lag - lag < window / 2:
                break
        if harness.ref.state() == "R":
            logger.info(
                "harness pid %d is runnable but silent: giving it %.1fs more",
                harness.ref.pid,
                self.settings.patience,
            )
            with trio.move_on_after(self.settings.patience):
                return await self._ping_until_answered(harness)
        return False

    async def _ping_until_answered(self, harness: Harness) -> bool:
        while harness.usable:
            link = harness.link
            if link is None:
                await harness.linked.wait()
            elif link.closed:
                await link.detached.wait()
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
        return f"no connection for {silence:.1f}s"
