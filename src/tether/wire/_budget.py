"""``FrameBudget``: how many bytes of unfinished frames a server's connections hold, together.

A frame may be up to ``MAX_FRAME`` (1 MiB), and a peer may send all of it but the last byte
and wait. Bounded per connection alone, 1,600 such peers would hold 1.6 GB of the server's
memory (issue 26). So the server's connections share one budget: a connection holding less
than ``FREE`` bytes may always read (small frames, the daemon's whole ordinary traffic, never
wait), and beyond that it reads only while the budget has room; past it, it stops reading
and its peer's sends wait in the kernel. ``FRAME_TIMEOUT`` ends a frame that never finishes,
so a held share is always given back.
"""

from __future__ import annotations

import trio

BUDGET = 16 * 1024 * 1024
"""Bytes of unfinished frames a server holds at most (beyond ``FREE`` per connection)."""
FREE = 4096
"""Bytes a connection may hold without asking: every frame the daemon reads in the ordinary
way (hello, pong, a ``tether`` request) fits."""
FRAME_TIMEOUT = 10.0
"""Seconds a frame a server reads may take from its first byte to its last."""


class FrameBudget:
    """The bytes a server's connections may hold in unfinished frames, all together."""

    def __init__(self, limit: int = BUDGET) -> None:
        self.limit = limit
        self.held = 0
        """Bytes held now, by every connection together."""
        self._lot = trio.lowlevel.ParkingLot()

    async def reserve(self, holding: int, wanted: int) -> int:
        """Take the bytes a connection that holds ``holding`` may read now (at most
        ``wanted``), waiting until the budget has room if it must; give back what the read
        did not use with ``adjust``."""
        while True:
            room = self.limit - self.held
            if holding < FREE:  # up to FREE in all, or what is wanted if there is room
                granted = max(FREE - holding, min(wanted, room))
            elif room > 0:
                granted = min(wanted, room)
            else:
                await self._lot.park()
                continue
            self.held += granted
            return granted

    def adjust(self, delta: int) -> None:
        """A connection now holds ``delta`` bytes more (or fewer)."""
        self.held += delta
        if delta < 0 and self._lot:
            self._lot.unpark_all()
