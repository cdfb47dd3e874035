"""The daemon's host lease: ``SharedHost`` on a store several hosts share, and ``SingleHost``,
its stand-in on a store only one host uses, so that no code asks whether there is a lease.

A daemon takes work only while it knows it still owns its sessions (``confirmed``). On one
host that is always; on a shared store it is while its lease is known alive.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import trio

from ..epochs import EpochStore, LeasedEpochStore, StoreUnavailable


class HostLease(Protocol):
    """What the daemon asks of its host's lease."""

    host: str | None
    """The host id harnesses and records carry (``None`` on a single-host store)."""

    def confirmed(self) -> bool:
        """Whether this daemon knows it still owns its sessions."""
        ...

    def remaining(self) -> float:
        """Seconds ``confirmed`` stays true unless renewed meanwhile (``inf``: always)."""
        ...

    def lost(self) -> str:
        """Why work is refused while not ``confirmed``."""
        ...

    async def hold(self, nursery: trio.Nursery) -> None:
        """Start holding the lease in ``nursery`` (returns once it is granted)."""
        ...

    async def claim(self, session: str, epoch: int) -> bool:
        """Whether ``session`` at ``epoch`` is this host's (claiming it on a shared store)."""
        ...

    async def owner(self, session: str) -> str | None:
        """The host that owns ``session``, if another's lease does (``None`` otherwise)."""
        ...

    async def release(self) -> None:
        """Give the lease up now, so every session it owns is free at once (best effort)."""
        ...


class SingleHost:
    """The lease of the only host on the store: always held, every session its own."""

    host: str | None = None

    def confirmed(self) -> bool:
        return True

    def remaining(self) -> float:
        return float("inf")

    def lost(self) -> str:
        return "never"  # pragma: no cover - a single host never loses its lease

    async def hold(self, nursery: trio.Nursery) -> None:
        await trio.lowlevel.checkpoint()

    async def claim(self, session: str, epoch: int) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    async def owner(self, session: str) -> str | None:
        await trio.lowlevel.checkpoint()
        return None

    async def release(self) -> None:
        await trio.lowlevel.checkpoint()


class SharedHost:
    """The lease of host ``store.host_id`` on a ``LeasedEpochStore`` (etcd)."""

    def __init__(self, store: LeasedEpochStore) -> None:
        self.store = store
        self.host: str | None = store.host_id

    def confirmed(self) -> bool:
        return self.store.lease_held()

    def remaining(self) -> float:
        return self.store.lease_remaining()

    def lost(self) -> str:
        return f"host {self.host} lost its lease on the store; its sessions are unconfirmed"

    async def hold(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.store.keep_alive)

    async def claim(self, session: str, epoch: int) -> bool:
        return await self.store.claim(session, epoch)

    async def owner(self, session: str) -> str | None:
        owner = await self.store.owner(session)
        return owner if owner != self.host else None

    async def release(self) -> None:
        with contextlib.suppress(StoreUnavailable):
            await self.store.revoke()


def lease_of(store: EpochStore) -> SingleHost | SharedHost:
    """The lease a daemon on ``store`` holds."""
    return SharedHost(store) if isinstance(store, LeasedEpochStore) else SingleHost()
