"""``EtcdEpochStore``: epochs, session records, queued prompts and host leases in etcd.

It speaks etcd's v3 JSON gateway with httpx's async client, which runs on trio, so the lease
keepalive and the ownership watch are ordinary tasks that cancel cleanly in a nursery (ADR
0017). Keys, under ``prefix``::

    epoch/<session>            the epoch; never on a lease, so an expiry cannot reset it
    record/<session>           the session record (JSON), fenced by the epoch key
    owner/<session>            the owning host's id, on that host's lease
    host/<host>                this daemon's instance id, on its lease (who is alive)
    outbox/<session>/<id>      a queued prompt (JSON), ordered by creation revision
    settled/<session>/<id>     a settled prompt's outcome, on a retention lease
    store-id                   the store's id, created once (harnesses are marked with it)

Every bump and fenced write is one transaction that compares the ``mod_revision`` read just
before it and retries on conflict, so two writers can never both succeed from the same read.
Every call is bounded by ``timeout``: past it, or when no endpoint answers, it raises
``StoreUnavailable`` naming the endpoints and the errors. The parts: ``EtcdClient`` (transport
and failover), ``HostLease`` (the lease and the sessions on it), ``EtcdOutbox`` (the queue),
``watch_released`` (the ownership watch); this class is the store that ties them together.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Self

import trio

from ..channels import Sender
from ._etcd_bump import EtcdBumps
from ._etcd_client import (
    EtcdClient,
    Keys,
    absent,
    first_kv,
    get,
    put,
    revision,
    same_revision,
    unb64,
)
from ._etcd_lease import HostLease
from ._etcd_outbox import EtcdOutbox
from ._etcd_watch import watch_released
from ._store import (
    FencedStore,
    OwnedElsewhere,
    QueuedPrompt,
    SessionRecord,
    fence_write,
)


class EtcdEpochStore(FencedStore):
    """The ``EpochStore`` shared by daemons on several hosts, on an etcd cluster: a facade whose
    methods are the ``LeasedEpochStore`` protocol, over ``EtcdClient``, ``HostLease``,
    ``EtcdOutbox`` and ``watch_released``.

    Args:
        endpoints: client URLs (``http://host:port``) or ``host:port`` pairs of the members.
        prefix: where its keys live (several deployments can share a cluster).
        host_id: this daemon's host; it owns the sessions it bumps while its lease lives.
        lease_ttl: seconds the host's lease lives without a keepalive.
        timeout: the bound of every operation, across all endpoints.
        keep_settled: seconds (at least) a settled prompt's outcome is kept, during which
            enqueuing its id again is a no-op; then etcd drops it, so the outbox holds only
            what is pending and etcd does not fill up with history.
        cacert: verify the members' certificates with this CA file (``host:port`` endpoints
            are then ``https``).
        cert: ``(certificate, key)`` files for client-certificate authentication.
        user: etcd's authentication: a token is asked for first, and again when it expires.
        password: the user's password.

    ``keep_alive`` must run (in a nursery) for the lease to outlive ``lease_ttl``; ``Agentd``
    runs it. ``lease_held`` turns false once no keepalive has been confirmed for the lease's
    TTL, which happens before etcd itself can expire the lease (the TTL counts from when a
    keepalive was sent here, etcd counts from when it arrived there).

    Example:
        ```python
        store = EtcdEpochStore(["127.0.0.1:2379"], host_id="host-a", lease_ttl=10)
        epoch = await store.bump("s1")
        ```
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str = "/tether",
        host_id: str,
        lease_ttl: int = 10,
        timeout: float = 5.0,
        keep_settled: int = 86_400,
        cacert: str | None = None,
        cert: tuple[str, str] | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if lease_ttl < 2 or not host_id or "/" in host_id:
            raise ValueError("lease_ttl must be at least 2 and host_id non-empty without '/'")
        if keep_settled < 2:
            raise ValueError("keep_settled must be at least 2 seconds")
        self.client = EtcdClient(
            endpoints, timeout, cacert=cacert, cert=cert, user=user, password=password
        )
        """The etcd v3 JSON gateway client all requests go through."""
        self.keys = Keys(prefix)
        """The key layout under ``prefix``."""
        self.endpoints = self.client.endpoints
        """The cluster's endpoints, tried in turn."""
        self.prefix = self.keys.prefix
        """The key prefix of this tether deployment."""
        self.host_id = host_id
        """This daemon's host id."""
        self.lease_ttl = lease_ttl
        """Seconds the host lease lives without a keepalive."""
        self.timeout = timeout
        """Seconds every operation may take, across all endpoints."""
        self.keep_settled = keep_settled
        """Seconds (at least) a settled prompt's outcome is kept before etcd drops it."""
        self.lease = HostLease(self.client, self.keys, host_id, lease_ttl)
        """The host lease that every owned session's keys are attached to."""
        self.outbox = EtcdOutbox(self.client, self.keys, keep_settled)
        """The durable prompt queue."""
        self.bumps = EtcdBumps(self.client, self.keys, self.lease, host_id)
        """Epoch bumps by compare-and-swap, fenced by the host lease."""
        self._identity: str | None = None

    def __repr__(self) -> str:
        return f"<tether.EtcdEpochStore {','.join(self.endpoints)} host={self.host_id!r}>"

    # -- epochs and records -----------------------------------------------------------------

    async def bump(self, session: str) -> int:
        """Issue the next epoch of ``session`` and make this host its owner, in one
        compare-and-swap transaction (retried on conflict); bumps made while another is in
        flight share transactions, up to 64 sessions each (``EtcdBumps``).

        Raises:
            OwnedElsewhere: another host owns the session and its lease is alive.
            StoreUnavailable: etcd did not answer within ``timeout``.
        """
        return await self.bumps.bump(session)

    async def current(self, session: str) -> int | None:
        """The latest epoch issued for ``session`` (a linearizable read), or ``None``."""
        kvs = await self.client.range(self.keys.key("epoch", session))
        return int(unb64(kvs[0]["value"])) if kvs else None

    async def owner(self, session: str) -> str | None:
        """The host whose live lease owns ``session``, or ``None``."""
        kvs = await self.client.range(self.keys.key("owner", session))
        return unb64(kvs[0]["value"]) if kvs else None

    async def record(self, session: str) -> SessionRecord | None:
        """The record last saved for ``session``, or ``None``."""
        kvs = await self.client.range(self.keys.key("record", session))
        return SessionRecord.from_dict(json.loads(unb64(kvs[0]["value"]))) if kvs else None

    async def save(self, session: str, record: SessionRecord, *, epoch: int) -> None:
        """Store ``record`` as written by the holder of ``epoch`` on this host: the transaction
        compares the epoch and owner keys' revisions read just before, so neither a stale
        writer nor a host that does not own the session can land.

        Raises:
            Superseded: ``epoch`` is older than the current epoch.
            OwnedElsewhere: another host's live lease owns the session.
        """
        epoch_key, owner_key = self.keys.key("epoch", session), self.keys.key("owner", session)
        value = json.dumps({**_fields(record), "epoch": epoch})
        while True:
            epoch_kv, owner_kv = await self.client.read(epoch_key, owner_key)
            fence_write(session, epoch, None if epoch_kv is None else int(unb64(epoch_kv["value"])))
            if owner_kv is not None and (host := unb64(owner_kv["value"])) != self.host_id:
                raise OwnedElsewhere(session, host)
            answer = await self.client.txn(
                [
                    same_revision(epoch_key, revision(epoch_kv)),
                    same_revision(owner_key, revision(owner_kv)),
                ],
                [put(self.keys.key("record", session), value)],
            )
            if answer.get("succeeded"):
                return

    async def sessions(self) -> list[str]:
        """Every session with a saved record, sorted."""
        start = self.keys.dir("record")
        kvs = await self.client.range(start, prefix=True, keys_only=True)
        return sorted(unb64(kv["key"])[len(start) :] for kv in kvs)

    # -- the outbox -------------------------------------------------------------------------

    async def enqueue(self, prompt: QueuedPrompt) -> None:
        """Queue ``prompt`` unless its id is already queued, or was settled within
        ``keep_settled``, for the session (one transaction: both keys absent)."""
        await self.outbox.enqueue(prompt)

    async def attempted(self, session: str, prompt_id: str) -> None:
        """Count one more delivery attempt of a queued prompt."""
        await self.outbox.attempted(session, prompt_id)

    async def settle(self, session: str, prompt_id: str, outcome: str) -> None:
        """Move the prompt out of the outbox to its outcome, kept ``keep_settled`` seconds."""
        await self.outbox.settle(session, prompt_id, outcome)

    async def pending(self) -> list[QueuedPrompt]:
        """Every queued prompt without an outcome, oldest (first created) first."""
        return await self.outbox.pending()

    # -- the host lease and ownership -------------------------------------------------------

    def lease_held(self) -> bool:
        """Whether this host's lease is known alive: granted, and kept alive within its TTL,
        counted from when the last keepalive was sent on a clock that keeps counting while
        the host sleeps (a laptop that slept past its TTL knows its lease is gone)."""
        return self.lease.held()

    def lease_remaining(self) -> float:
        """Seconds ``lease_held`` stays true unless a keepalive is confirmed meanwhile."""
        return self.lease.remaining()

    async def keep_alive(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold this host's lease until cancelled (``HostLease.keep_alive``).

        Raises:
            StoreUnavailable: from the first grant only (the host never had a lease).
        """
        await self.lease.keep_alive(task_status=task_status)

    async def claim(self, session: str, epoch: int) -> bool:
        """Hang ``session`` on this host's lease if ``epoch`` is still its current epoch and no
        other host owns it (a restarted daemon keeping its sessions); whether it is ours."""
        return await self.lease.claim(session, epoch)

    async def watch_released(
        self,
        sessions: Sender[str],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Send each session whose owner's lease ends (expires or is revoked) to ``sessions``
        until cancelled; started once etcd's watch is in place (``watch_released``).

        Raises:
            StoreUnavailable: no endpoint answered before the watch was first in place.
        """
        await watch_released(
            self.client, self.keys, self.host_id, sessions, task_status=task_status
        )

    async def orphaned(self) -> list[str]:
        """Sessions with a record and no live owner (their host's lease ended)."""
        start = self.keys.dir("owner")
        kvs = await self.client.range(start, prefix=True, keys_only=True)
        owners = {unb64(kv["key"])[len(start) :] for kv in kvs}
        return [session for session in await self.sessions() if session not in owners]

    async def revoke(self) -> None:
        """End this host's lease now, so every session it owns is free at once (a daemon
        that stops its harnesses does this; one that leaves them running lets the lease
        expire, so a restart within the TTL keeps its sessions)."""
        await self.lease.revoke()

    # -- the store itself -------------------------------------------------------------------

    async def identity(self) -> str:
        """The store's id: created by the first daemon that asks (one transaction, create if
        absent), then read; every host of the store shares it."""
        if self._identity is None:
            key, fresh = self.keys.key("store-id"), uuid.uuid4().hex[:16]
            answer = await self.client.txn([absent(key)], [put(key, fresh)], [get(key)])
            kv = None if answer.get("succeeded") else first_kv(answer["responses"][0])
            self._identity = fresh if kv is None else unb64(kv["value"])
        return self._identity

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Nothing to hold: each host's lease and host id keep daemons apart (ADR 0018)."""
        await trio.lowlevel.checkpoint()
        yield

    async def aclose(self) -> None:
        """Close the HTTP client; the lease is left to expire (``revoke`` ends it now)."""
        await self.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _fields(record: SessionRecord) -> dict[str, Any]:
    return {
        "pid": record.pid,
        "create_time": record.create_time,
        "boot_id": record.boot_id,
        "state": record.state,
        "restarts": record.restarts,
        "reason": record.reason,
        "host": record.host,
        **record.extra(),
    }
