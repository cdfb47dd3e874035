"""``HostLease``: one host's lease on etcd, the sessions hung on it, and who holds the host id.

The lease is judged here, on a clock that keeps counting while the host sleeps: it is held
while the last confirmed keepalive (counted from when it was *sent*) is younger than the TTL,
so this side gives it up before etcd can expire it. Its life is a small state machine,
``LeasePhase``; a later daemon writing its own instance under the host id displaces this one
for good (ADR 0018).
"""

from __future__ import annotations

import enum
import logging
import math
import uuid

import trio

from .. import _util
from ._etcd_client import (
    NOT_FOUND,
    EtcdClient,
    EtcdRefused,
    Keys,
    put,
    revision,
    same_revision,
    unb64,
)
from ._store import HostIdInUse, StoreUnavailable

logger = logging.getLogger("tether.epochs")


class LeasePhase(enum.Enum):
    """Where a host's lease is in its life."""

    NEW = "new"
    """Never granted yet."""
    HELD = "held"
    """Granted; held while its last keepalive is younger than the TTL."""
    LOST = "lost"
    """No keepalive confirmed within the TTL (logged once); a new lease is granted as soon as
    etcd answers."""
    REVOKED = "revoked"
    """Given up on purpose: no more keepalives (a last call may still grant one)."""
    DISPLACED = "displaced"
    """Another daemon took the host id: every call raises ``HostIdInUse`` from now on."""


class HostLease:
    """The lease of host ``host_id``: ``held``/``remaining``, ``keep_alive``, and the sessions
    this host owns (``claim``, hung on the lease; re-hung on a new lease after a loss)."""

    def __init__(self, client: EtcdClient, keys: Keys, host_id: str, ttl: int) -> None:
        self.client = client
        self.keys = keys
        self.host_id = host_id
        self.ttl = ttl
        self.phase = LeasePhase.NEW
        self.id: int | None = None
        self._until = -math.inf
        self._lock = trio.Lock()
        self._owned: dict[str, int] = {}
        """Sessions hung on this lease, and the epoch each was claimed at."""
        self._instance = uuid.uuid4().hex
        """Written under ``host/<host_id>``: another value there means another daemon started
        with this host id, and this one stands down."""
        self._displaced: HostIdInUse | None = None

    def held(self) -> bool:
        """Whether the lease is known alive now."""
        return self.remaining() > 0

    def remaining(self) -> float:
        """Seconds ``held`` stays true unless a keepalive is confirmed meanwhile."""
        if self.id is None:
            return 0.0
        return max(0.0, self._until - _util.boottime())

    def own(self, session: str, epoch: int) -> None:
        """Record that a bump hung ``session`` on this lease at ``epoch``."""
        self._owned[session] = epoch

    def forget(self) -> None:
        self.id, self._until = None, -math.inf
        self._owned.clear()

    async def ensure(self) -> int:
        """The lease's id, granting a new lease (and re-hanging this host's sessions on it)
        if it is not held.

        Raises:
            HostIdInUse: another daemon took the host id.
            StoreUnavailable: etcd did not answer.
        """
        async with self._lock:
            if self._displaced is not None:
                raise self._displaced
            if self.id is not None and self.held():
                return self.id
            if self.id is not None or self.phase is LeasePhase.LOST:
                await self.check_host()  # a newer daemon may have the id since we lost it
            sent = _util.boottime()
            granted = await self.client.call("/v3/lease/grant", {"TTL": self.ttl}, lease=True)
            lease = int(granted["ID"])
            self.id, self._until = lease, sent + int(granted["TTL"])
            host = put(self.keys.key("host", self.host_id), self._instance, lease)
            await self.client.call("/v3/kv/put", host["request_put"], lease=True)
            if self.phase is LeasePhase.LOST:
                logger.warning("host %s: granted a new lease %x", self.host_id, lease)
            if self.phase is not LeasePhase.REVOKED:
                self.phase = LeasePhase.HELD
            await self._reclaim(lease)
            return lease

    async def check_host(self) -> None:
        """Stand down if another daemon wrote its instance under this host id; a later
        daemon with the same id wins, as a restarted one must.

        Raises:
            HostIdInUse: it did.
        """
        (kv,) = await self.client.read(self.keys.key("host", self.host_id), lease=True)
        if kv is None or unb64(kv["value"]) == self._instance:
            return
        self._displaced = HostIdInUse(self.client.where(), self.host_id)
        self.phase = LeasePhase.DISPLACED
        self.forget()
        logger.error("host %s: %s", self.host_id, self._displaced.error)
        raise self._displaced

    async def claim(self, session: str, epoch: int) -> bool:
        """Hang ``session`` on this host's lease if ``epoch`` is still its current epoch and no
        other host owns it (a restarted daemon keeping its sessions); whether it is ours."""
        return await self._claim_on(await self.ensure(), session, epoch)

    async def _claim_on(self, lease: int, session: str, epoch: int) -> bool:
        """One transaction comparing both keys' revisions as read: the epoch still ``epoch``,
        the owner key absent or this host's (under an older lease)."""
        epoch_key, owner_key = self.keys.key("epoch", session), self.keys.key("owner", session)
        while True:
            epoch_kv, owner_kv = await self.client.read(epoch_key, owner_key)
            if epoch_kv is None or int(unb64(epoch_kv["value"])) != epoch:
                return False
            if owner_kv is not None and unb64(owner_kv["value"]) != self.host_id:
                return False
            answer = await self.client.txn(
                [
                    same_revision(epoch_key, revision(epoch_kv)),
                    same_revision(owner_key, revision(owner_kv)),
                ],
                [put(owner_key, self.host_id, lease)],
            )
            if answer.get("succeeded"):
                self._owned[session] = epoch
                return True

    async def _reclaim(self, lease: int) -> None:
        """Hang the sessions this host owned on its new lease, unless another host bumped
        them meanwhile (those are forgotten: their harness here is superseded)."""
        for session, epoch in list(self._owned.items()):
            if not await self._claim_on(lease, session, epoch):
                self._owned.pop(session, None)
                logger.warning(
                    "host %s: session %s was taken over while its lease was lost",
                    self.host_id,
                    session,
                )

    async def keep_alive(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold the lease until cancelled: grant it, then keep it alive every third of its
        TTL. While keepalives fail, retry every sixth of it (at most a second), log the loss
        as soon as the TTL has passed since the last confirmed one (``held`` is then false),
        and grant a new lease once etcd answers again.

        Raises:
            StoreUnavailable: from the first grant only (the host never had a lease).
            HostIdInUse: another daemon took the host id.
        """
        await self.ensure()
        task_status.started()
        failing = False
        while self.phase is not LeasePhase.REVOKED:
            if self._displaced is not None:
                raise self._displaced
            delay = min(1.0, self.ttl / 6) if failing else self.ttl / 3
            if failing and self.held():
                delay = max(0.0, min(delay, self._until - _util.boottime()))
            await trio.sleep(delay)
            if failing and not self.held():
                self.note_lost("no keepalive confirmed within its TTL")
            failing = not await self.refresh()

    async def refresh(self) -> bool:
        """One keepalive; whether it confirmed the lease (or a new one was granted)."""
        lease = self.id
        sent = _util.boottime()
        try:
            if lease is None:
                await self.ensure()
                return True
            answer = await self.client.call(
                "/v3/lease/keepalive", {"ID": str(lease)}, bound=self.ttl / 3, lease=True
            )
        except StoreUnavailable as exc:
            self.note_lost(str(exc))
            return False
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl > 0:
            try:
                await self.check_host()
            except HostIdInUse:
                return False
            except StoreUnavailable as exc:
                self.note_lost(str(exc))
                return False
            self._until = sent + ttl
            if self.phase is LeasePhase.LOST:
                logger.warning("host %s holds its lease again", self.host_id)
                self.phase = LeasePhase.HELD
            return True
        self._until = -math.inf
        self.note_lost("etcd says the lease expired")
        try:
            await self.ensure()
        except StoreUnavailable as exc:
            self.note_lost(str(exc))
            return False
        return True

    def note_lost(self, why: str) -> None:
        if not self.held() and self.phase in (LeasePhase.NEW, LeasePhase.HELD):
            self.phase = LeasePhase.LOST
            logger.error("host %s lost its lease: %s", self.host_id, why)

    async def revoke(self) -> None:
        """End the lease now, so every session it owns is free at once."""
        lease = self.id
        self.forget()
        self.phase = LeasePhase.REVOKED
        if lease is not None:
            await self.client.call("/v3/lease/revoke", {"ID": str(lease)}, lease=True)

    def raise_if_displaced(self) -> None:
        if self._displaced is not None:
            raise self._displaced


def lease_not_found(exc: StoreUnavailable) -> bool:
    """Whether etcd refused a request for naming a lease it does not have."""
    return isinstance(exc, EtcdRefused) and exc.code == NOT_FOUND
