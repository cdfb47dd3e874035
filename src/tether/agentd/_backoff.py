"""``Backoff``: how long a crashing session waits between restarts.

The first restart of a session is at once; each one after waits ``first`` seconds doubled
for every restart in a row before it, up to ``cap``, with up to ``jitter`` of that added or
taken at random, so sessions that crash together do not restart together. A harness that
stayed up ``reset_after`` seconds ends the streak. The streak and the time of the next
attempt are in the session's record, so a daemon restart keeps them.
"""

from __future__ import annotations

import random

import attrs


@attrs.frozen
class Backoff:
    """The restart backoff of ``Agentd(restart_backoff=...)``."""

    first: float = 0.5
    """Seconds before the first restart after a crash."""
    cap: float = 30.0
    """The longest wait between restarts, in seconds; each crash doubles the wait up to it."""
    reset_after: float = 60.0
    """Seconds a harness must stay up before its next crash starts from ``first`` again."""
    jitter: float = 0.1
    """Up to this fraction of each wait is added or taken away at random, so sessions do not restart
    in step."""

    def __attrs_post_init__(self) -> None:
        """Refuse a backoff that makes no sense.

        Raises:
            ValueError: naming what is wrong.
        """
        if self.first < 0 or self.cap < self.first or self.reset_after < 0:
            raise ValueError("restart backoff: need 0 <= first <= cap and reset_after >= 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("restart backoff: jitter must be in [0, 1)")

    def delay(self, streak: int) -> float:
        """Seconds to wait after the ``streak``-th restart in a row before the next one."""
        if streak <= 0 or self.first == 0:
            return 0.0
        base = min(self.cap, self.first * 2.0 ** min(streak - 1, 64))
        return base * (1 + random.uniform(-self.jitter, self.jitter))  # spreading, not secrecy
