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
``StoreUnavailable`` naming the endpoints and the errors.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Self
from urllib.parse import quote, unquote

import httpx
import trio

from .. import _util
from ..channels import Sender, SendError
from ._store import (
    HostIdInUse,
    OwnedElsewhere,
    QueuedPrompt,
    SessionRecord,
    StoreUnavailable,
    Superseded,
)

logger = logging.getLogger("tether.epochs")

_RETRYABLE = {4, 14}
"""gRPC codes worth another endpoint: deadline exceeded, unavailable (no leader, a restart)."""
_CONCURRENCY = 32
"""Calls in flight per store: more wait for a turn (within their bound) rather than queue in
httpx's pool, where the per-attempt timer would run while nothing is sent."""
_LEASE_NOT_FOUND = "requested lease not found"
"""etcd's message (``rpctypes.ErrLeaseNotFound``) for a put on a lease it does not have."""
_WIDTH = 20
"""Epochs are stored zero-padded so that etcd's byte-wise value comparison is numeric."""


class _Body(httpx.AsyncByteStream):
    """A request body httpx iterates without an async generator: httpx's own is left
    suspended when a request is cancelled mid-send, and trio then warns when it is collected
    (encode/httpx#3686)."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if self._data is None:
            raise StopAsyncIteration
        data, self._data = self._data, None
        return data


def _request(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: httpx.Timeout | None = None
) -> httpx.Request:
    data = json.dumps(body).encode()
    request = client.build_request(
        "POST",
        url,
        content=data,
        headers={"Content-Type": "application/json"},
        timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
    )
    request.stream = _Body(data)
    return request


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def _prefix_end(key: str) -> str:
    """The range end that makes a range over ``key`` a range over every key starting with it."""
    raw = bytearray(key.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


def _kv(response: dict[str, Any]) -> dict[str, Any] | None:
    """The single key-value of a range response, or ``None``."""
    kvs = response.get("response_range", response).get("kvs") or []
    return kvs[0] if kvs else None


def _rev(kv: dict[str, Any] | None) -> str:
    return "0" if kv is None else str(kv.get("mod_revision", "0"))


class EtcdEpochStore:
    """The ``EpochStore`` shared by daemons on several hosts, on an etcd cluster.

    Args:
        endpoints: client URLs (``http://host:port``) or ``host:port`` pairs of the members.
        prefix: where its keys live (several deployments can share a cluster).
        host_id: this daemon's host; it owns the sessions it bumps while its lease lives.
        lease_ttl: seconds the host's lease lives without a keepalive.
        timeout: the bound of every operation, across all endpoints.
        keep_settled: seconds (at least) a settled prompt's outcome is kept, during which
            enqueuing its id again is a no-op; then etcd drops it, so the outbox holds only
            what is pending and etcd does not fill up with history.

    ``keep_alive`` must run (in a nursery) for the lease to outlive ``lease_ttl``; ``Agentd``
    runs it. ``lease_held`` turns false once no keepalive has been confirmed for the lease's
    TTL, which happens before etcd itself can expire the lease (the TTL counts from when a
    keepalive was sent here, etcd counts from when it arrived there).

    Example::

        store = EtcdEpochStore(["127.0.0.1:2379"], host_id="host-a", lease_ttl=10)
        epoch = await store.bump("s1")
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
    ) -> None:
        if not endpoints:
            raise ValueError("name at least one etcd endpoint")
        if lease_ttl < 2 or not host_id or "/" in host_id:
            raise ValueError("lease_ttl must be at least 2 and host_id non-empty without '/'")
        if keep_settled < 2:
            raise ValueError("keep_settled must be at least 2 seconds")
        self.endpoints = tuple(e if "://" in e else f"http://{e}" for e in endpoints)
        self.prefix = prefix.rstrip("/") + "/"
        self.host_id = host_id
        self.lease_ttl = lease_ttl
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None
        self._good = 0
        self._lease: int | None = None
        self._lease_until = -math.inf
        self._lease_lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(_CONCURRENCY)
        self._owned: dict[str, int] = {}
        self._last: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
        self._lost_logged = False
        self._revoked = False
        """Set by ``revoke``: ``keep_alive`` ends instead of granting a new lease."""
        self._instance = uuid.uuid4().hex
        """Written under ``host/<host_id>``: another value there means another daemon
        started with this host id, and this one stands down (``HostIdInUse``)."""
        self._displaced: HostIdInUse | None = None
        self.keep_settled = keep_settled
        self._retention: tuple[int, float] | None = None
        """The lease settled outcomes hang on, and when it was granted (boot time)."""
        self._retention_lock = trio.Lock()
        self._identity: str | None = None

    def __repr__(self) -> str:
        return f"<tether.EtcdEpochStore {','.join(self.endpoints)} host={self.host_id!r}>"

    # -- transport --------------------------------------------------------------------------

    async def _call(
        self, path: str, body: dict[str, Any], *, bound: float | None = None
    ) -> dict[str, Any]:
        """POST ``body`` to the first endpoint that answers, starting with the last good one,
        within ``bound`` seconds (default: the store's ``timeout``).

        At most ``_CONCURRENCY`` calls are in flight; the others wait their turn within their
        bound. Each attempt gets a third of the bound, so a member that hangs (it lost its
        leader, or forwards to a dead one) costs one attempt, not the whole call; rounds over
        the endpoints repeat until the bound unless every endpoint refused the connection.
        Retrying is safe for every call tether makes: writes are compare-and-swap or
        create-if-absent, and a duplicated lease grant expires unused.
        """
        bound = self.timeout if bound is None else min(bound, self.timeout)
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=min(1.0, self.timeout))
            )
        deadline = trio.current_time() + bound
        with trio.move_on_at(deadline) as waiting:
            await self._limiter.acquire()
        if waiting.cancelled_caught:
            raise StoreUnavailable(
                self._where(), f"no free connection within {bound:g}s ({_CONCURRENCY} calls busy)"
            )
        try:
            return await self._attempts(path, body, bound, deadline)
        finally:
            self._limiter.release()

    async def _attempts(
        self, path: str, body: dict[str, Any], bound: float, deadline: float
    ) -> dict[str, Any]:
        assert self._client is not None
        errors: dict[str, str] = {}
        while True:
            refused = 0
            for step in range(len(self.endpoints)):
                index = (self._good + step) % len(self.endpoints)
                endpoint = self.endpoints[index]
                left = deadline - trio.current_time()
                if left <= 0:
                    errors["bound"] = f"no answer within {bound:g}s"
                    raise StoreUnavailable(self._where(), "; ".join(errors.values()))
                cap = min(left, max(0.5, bound / 3))
                with trio.move_on_after(cap) as attempt:
                    try:
                        request = _request(self._client, endpoint + path, body)
                        response = await self._client.send(request)
                        data = response.json()
                    except (httpx.ConnectError, ValueError) as exc:
                        refused += isinstance(exc, httpx.ConnectError)
                        errors[endpoint] = f"{endpoint}: {type(exc).__name__}: {exc}"
                        continue
                    except httpx.HTTPError as exc:
                        errors[endpoint] = f"{endpoint}: {type(exc).__name__}: {exc}"
                        continue
                if attempt.cancelled_caught:
                    errors[endpoint] = f"{endpoint}: no answer within {cap:.2g}s"
                    continue
                if response.status_code == 200:
                    self._good = index
                    return dict(data)
                message = data.get("message") or data.get("error") or response.text
                if data.get("code") in _RETRYABLE or response.status_code >= 500:
                    errors[endpoint] = f"{endpoint}: {message}"
                    continue
                raise StoreUnavailable(self._where(), f"{path} refused: {message}")
            if refused == len(self.endpoints):
                raise StoreUnavailable(self._where(), "; ".join(errors.values()))
            await trio.sleep(min(0.1, max(0.0, deadline - trio.current_time())))

    def _where(self) -> str:
        return ",".join(self.endpoints)

    def _dir(self, kind: str) -> str:
        return f"{self.prefix}{kind}/"

    def _key(self, kind: str, *parts: str) -> str:
        for part in parts:
            if not part or "/" in part:
                raise ValueError(f"{kind} name {part!r}: must be non-empty without '/'")
        return self.prefix + "/".join((kind, *parts))

    async def _range(
        self, key: str, *, prefix: bool = False, keys_only: bool = False
    ) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"key": _b64(key), "keys_only": keys_only}
        if prefix:
            body["range_end"] = _prefix_end(key)
        return list((await self._call("/v3/kv/range", body)).get("kvs") or [])

    async def _txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        body = {"compare": compare, "success": success, "failure": failure or []}
        return await self._call("/v3/kv/txn", body)

    @staticmethod
    def _same_rev(key: str, rev: str) -> dict[str, Any]:
        return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev}

    @staticmethod
    def _put(key: str, value: str, lease: int | None = None) -> dict[str, Any]:
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease is not None:
            put["lease"] = str(lease)
        return {"request_put": put}

    # -- epochs and records -----------------------------------------------------------------

    async def _read(self, *keys: str) -> list[dict[str, Any] | None]:
        """The keys' values at one revision (a read-only transaction)."""
        ranges = [{"request_range": {"key": _b64(key)}} for key in keys]
        answer = await self._txn([], ranges)
        return [_kv(response) for response in answer.get("responses", [])]

    async def bump(self, session: str) -> int:
        """Issue the next epoch of ``session`` and make this host its owner, in one
        compare-and-swap transaction (retried on conflict).

        Raises:
            OwnedElsewhere: another host owns the session and its lease is alive.
            StoreUnavailable: etcd did not answer within ``timeout``.
        """
        epoch_key, owner_key = self._key("epoch", session), self._key("owner", session)
        # What this store wrote last is the likely state: try the swap on it at once (one
        # round trip); a stale guess fails the comparison and the answer carries the truth.
        guess = self._last.get(session)
        epoch_kv, owner_kv = guess if guess else await self._read(epoch_key, owner_key)
        while True:
            lease = await self._ensure_lease()
            if owner_kv is not None and (host := _unb64(owner_kv["value"])) != self.host_id:
                self._last.pop(session, None)
                raise OwnedElsewhere(session, host)
            epoch = 1 + (0 if epoch_kv is None else int(_unb64(epoch_kv["value"])))
            value = f"{epoch:0{_WIDTH}d}"
            answer = await self._txn(
                [
                    self._same_rev(epoch_key, _rev(epoch_kv)),
                    self._same_rev(owner_key, _rev(owner_kv)),
                ],
                [self._put(epoch_key, value), self._put(owner_key, self.host_id, lease)],
                [
                    {"request_range": {"key": _b64(epoch_key)}},
                    {"request_range": {"key": _b64(owner_key)}},
                ],
            )
            if answer.get("succeeded"):
                revision = answer["header"]["revision"]
                self._last[session] = (
                    {"value": _b64(value), "mod_revision": revision},
                    {"value": _b64(self.host_id), "mod_revision": revision},
                )
                self._owned[session] = epoch
                return epoch
            epoch_kv, owner_kv = (_kv(r) for r in answer.get("responses", []))

    async def current(self, session: str) -> int | None:
        """The latest epoch issued for ``session`` (a linearizable read), or ``None``."""
        kvs = await self._range(self._key("epoch", session))
        return int(_unb64(kvs[0]["value"])) if kvs else None

    async def check(self, session: str, epoch: int) -> None:
        """Return if ``epoch`` is current.

        Raises:
            Superseded: a newer epoch was issued, or none ever was.
        """
        current = await self.current(session)
        if current != epoch:
            raise Superseded(session, epoch, current)

    async def owner(self, session: str) -> str | None:
        """The host whose live lease owns ``session``, or ``None``."""
        kvs = await self._range(self._key("owner", session))
        return _unb64(kvs[0]["value"]) if kvs else None

    async def record(self, session: str) -> SessionRecord | None:
        """The record last saved for ``session``, or ``None``."""
        kvs = await self._range(self._key("record", session))
        return SessionRecord(**json.loads(_unb64(kvs[0]["value"]))) if kvs else None

    async def save(self, session: str, record: SessionRecord, *, epoch: int) -> None:
        """Store ``record`` as written by the holder of ``epoch`` on this host: the transaction
        compares the epoch and owner keys' revisions read just before, so neither a stale
        writer nor a host that does not own the session can land.

        Raises:
            Superseded: ``epoch`` is older than the current epoch.
            OwnedElsewhere: another host's live lease owns the session.
        """
        epoch_key, owner_key = self._key("epoch", session), self._key("owner", session)
        value = json.dumps({**_fields(record), "epoch": epoch})
        while True:
            epoch_kv, owner_kv = await self._read(epoch_key, owner_key)
            current = None if epoch_kv is None else int(_unb64(epoch_kv["value"]))
            if current is not None and epoch < current:
                raise Superseded(session, epoch, current)
            if owner_kv is not None and (host := _unb64(owner_kv["value"])) != self.host_id:
                raise OwnedElsewhere(session, host)
            answer = await self._txn(
                [
                    self._same_rev(epoch_key, _rev(epoch_kv)),
                    self._same_rev(owner_key, _rev(owner_kv)),
                ],
                [self._put(self._key("record", session), value)],
            )
            if answer.get("succeeded"):
                return

    async def sessions(self) -> list[str]:
        """Every session with a saved record, sorted."""
        start = self._dir("record")
        kvs = await self._range(start, prefix=True, keys_only=True)
        return sorted(_unb64(kv["key"])[len(start) :] for kv in kvs)

    # -- the outbox -------------------------------------------------------------------------

    def _outbox_key(self, session: str, prompt_id: str) -> str:
        return self._key("outbox", session, quote(prompt_id, safe=""))

    def _settled_key(self, session: str, prompt_id: str) -> str:
        return self._key("settled", session, quote(prompt_id, safe=""))

    async def enqueue(self, prompt: QueuedPrompt) -> None:
        """Queue ``prompt`` unless its id is already queued, or was settled within
        ``keep_settled``, for the session (one transaction: both keys absent)."""
        key = self._outbox_key(prompt.session, prompt.id)
        value = json.dumps(
            {"text": prompt.text, "meta": prompt.meta, "attempts": prompt.attempts, "outcome": None}
        )
        absent = [
            {"key": _b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
            for k in (key, self._settled_key(prompt.session, prompt.id))
        ]
        await self._txn(absent, [self._put(key, value)])

    async def _update(
        self, session: str, prompt_id: str, change: Callable[[dict[str, Any]], None]
    ) -> None:
        """Read-modify-write one queued prompt, compare-and-swap on its revision."""
        key = self._outbox_key(session, prompt_id)
        while True:
            kvs = await self._range(key)
            if not kvs:
                return
            item = json.loads(_unb64(kvs[0]["value"]))
            change(item)
            answer = await self._txn(
                [self._same_rev(key, _rev(kvs[0]))], [self._put(key, json.dumps(item))]
            )
            if answer.get("succeeded"):
                return

    async def attempted(self, session: str, prompt_id: str) -> None:
        """Count one more delivery attempt of a queued prompt."""
        await self._update(
            session, prompt_id, lambda item: item.update(attempts=item["attempts"] + 1)
        )

    async def settle(self, session: str, prompt_id: str, outcome: str) -> None:
        """Move the prompt out of the outbox (it is no longer ``pending``) to its outcome,
        which etcd keeps for ``keep_settled`` seconds; one transaction per try."""
        key = self._outbox_key(session, prompt_id)
        lease, renewed = await self._retain(), False
        while True:
            kvs = await self._range(key)
            if not kvs:
                return  # settled already (or never queued)
            delete = {"request_delete_range": {"key": _b64(key)}}
            settled = self._put(self._settled_key(session, prompt_id), outcome, lease)
            try:
                answer = await self._txn([self._same_rev(key, _rev(kvs[0]))], [delete, settled])
            except StoreUnavailable as exc:
                if _LEASE_NOT_FOUND not in exc.error or renewed:
                    raise
                lease, renewed = await self._retain(renew=True), True  # etcd lost it (a restore)
                continue
            if answer.get("succeeded"):
                return

    async def _retain(self, *, renew: bool = False) -> int:
        """The retention lease for settled outcomes: granted for ``keep_settled`` and used for
        half of it, so each outcome lives between half and all of ``keep_settled``."""
        async with self._retention_lock:
            now = _util.boottime()
            if renew or self._retention is None or now - self._retention[1] > self.keep_settled / 2:
                granted = await self._call("/v3/lease/grant", {"TTL": self.keep_settled})
                self._retention = (int(granted["ID"]), now)
            return self._retention[0]

    async def pending(self) -> list[QueuedPrompt]:
        """Every queued prompt without an outcome, oldest (first created) first."""
        start = self._dir("outbox")
        kvs = sorted(
            await self._range(start, prefix=True), key=lambda kv: int(kv["create_revision"])
        )
        queued = []
        for kv in kvs:
            session, _, quoted = _unb64(kv["key"])[len(start) :].partition("/")
            item = json.loads(_unb64(kv["value"]))
            if item["outcome"] is None:
                queued.append(
                    QueuedPrompt(
                        session, unquote(quoted), item["text"], item["meta"], item["attempts"]
                    )
                )
        return queued

    # -- the host lease ---------------------------------------------------------------------

    def lease_held(self) -> bool:
        """Whether this host's lease is known alive: granted, and kept alive within its TTL,
        counted from when the last keepalive was sent on a clock that keeps counting while
        the host sleeps (a laptop that slept past its TTL knows its lease is gone)."""
        return self.lease_remaining() > 0

    def lease_remaining(self) -> float:
        """Seconds ``lease_held`` stays true unless a keepalive is confirmed meanwhile."""
        if self._lease is None:
            return 0.0
        return max(0.0, self._lease_until - _util.boottime())

    async def _ensure_lease(self) -> int:
        async with self._lease_lock:
            if self._displaced is not None:
                raise self._displaced
            if self._lease is not None and self.lease_held():
                return self._lease
            if self._lease is not None or self._lost_logged:
                await self._check_host()  # a newer daemon may have the id since we lost it
            sent = _util.boottime()
            granted = await self._call("/v3/lease/grant", {"TTL": self.lease_ttl})
            lease = int(granted["ID"])
            self._lease, self._lease_until = lease, sent + int(granted["TTL"])
            host = self._put(self._key("host", self.host_id), self._instance, lease)
            await self._call("/v3/kv/put", host["request_put"])
            if self._lost_logged:
                logger.warning("host %s: granted a new lease %x", self.host_id, lease)
                self._lost_logged = False
            await self._reclaim(lease)
            return lease

    async def _check_host(self) -> None:
        """Stand down if another daemon wrote its instance under this host id; a later
        daemon with the same id wins, as a restarted one must."""
        (kv,) = await self._read(self._key("host", self.host_id))
        if kv is None or _unb64(kv["value"]) == self._instance:
            return
        self._displaced = HostIdInUse(self._where(), self.host_id)
        self._lease, self._lease_until = None, -math.inf
        self._owned.clear()
        logger.error("host %s: %s", self.host_id, self._displaced.error)
        raise self._displaced

    async def claim(self, session: str, epoch: int) -> bool:
        """Hang ``session`` on this host's lease if ``epoch`` is still its current epoch and no
        other host owns it (a restarted daemon keeping its sessions); whether it is ours."""
        return await self._claim_on(await self._ensure_lease(), session, epoch)

    async def _claim_on(self, lease: int, session: str, epoch: int) -> bool:
        """One transaction comparing both keys' revisions as read: the epoch still ``epoch``,
        the owner key absent or this host's (under an older lease)."""
        epoch_key, owner_key = self._key("epoch", session), self._key("owner", session)
        while True:
            epoch_kv, owner_kv = await self._read(epoch_key, owner_key)
            if epoch_kv is None or int(_unb64(epoch_kv["value"])) != epoch:
                return False
            if owner_kv is not None and _unb64(owner_kv["value"]) != self.host_id:
                return False
            answer = await self._txn(
                [
                    self._same_rev(epoch_key, _rev(epoch_kv)),
                    self._same_rev(owner_key, _rev(owner_kv)),
                ],
                [self._put(owner_key, self.host_id, lease)],
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
        """Hold this host's lease until cancelled: grant it, then keep it alive every third of
        its TTL. While keepalives fail, retry every sixth of it (at most a second), log the
        loss as soon as the TTL has passed since the last confirmed one (``lease_held`` is
        then false), and grant a new lease once etcd answers again.

        Raises:
            StoreUnavailable: from the first grant only (the host never had a lease).
        """
        await self._ensure_lease()
        task_status.started()
        failing = False
        while not self._revoked:
            if self._displaced is not None:
                raise self._displaced
            delay = min(1.0, self.lease_ttl / 6) if failing else self.lease_ttl / 3
            if failing and self.lease_held():
                delay = max(0.0, min(delay, self._lease_until - _util.boottime()))
            await trio.sleep(delay)
            if failing and not self.lease_held():
                self._note_lost("no keepalive confirmed within its TTL")
            failing = not await self._refresh()

    async def _refresh(self) -> bool:
        """One keepalive; whether it confirmed the lease (or a new one was granted)."""
        lease = self._lease
        sent = _util.boottime()
        try:
            if lease is None:
                await self._ensure_lease()
                return True
            answer = await self._call(
                "/v3/lease/keepalive", {"ID": str(lease)}, bound=self.lease_ttl / 3
            )
        except StoreUnavailable as exc:
            self._note_lost(str(exc))
            return False
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl > 0:
            try:
                await self._check_host()
            except HostIdInUse:
                return False
            except StoreUnavailable as exc:
                self._note_lost(str(exc))
                return False
            self._lease_until = sent + ttl
            if self._lost_logged:
                logger.warning("host %s holds its lease again", self.host_id)
                self._lost_logged = False
            return True
        self._lease_until = -math.inf
        self._note_lost("etcd says the lease expired")
        try:
            await self._ensure_lease()
        except StoreUnavailable as exc:
            self._note_lost(str(exc))
            return False
        return True

    def _note_lost(self, why: str) -> None:
        if not self.lease_held() and not self._lost_logged:
            self._lost_logged = True
            logger.error("host %s lost its lease: %s", self.host_id, why)

    async def watch_released(
        self,
        sessions: Sender[str],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Send each session whose owner's lease ends (expires or is revoked) to ``sessions``
        until cancelled; started once etcd's watch is in place. A broken watch is reopened on
        the next endpoint from the revision after the last event seen, so no release is
        missed while etcd keeps its history; the sender is closed on return.

        Raises:
            StoreUnavailable: no endpoint answered before the watch was first in place.
        """
        start = self._dir("owner")
        body: dict[str, Any] = {"key": _b64(start), "range_end": _prefix_end(start)}
        with sessions:
            await self.owner("-")  # opens the client on an endpoint that answers, or raises
            assert self._client is not None
            started = broken = False
            while True:
                endpoint = self.endpoints[self._good]
                request = _request(
                    self._client,
                    endpoint + "/v3/watch",
                    {"create_request": body},
                    httpx.Timeout(self.timeout, read=None),
                )
                try:
                    response = await self._client.send(request, stream=True)
                    try:
                        # Nothing in this loop may wait: httpx's line iterator must only
                        # ever be interrupted inside itself, where it unwinds (ADR 0017).
                        async for line in response.aiter_lines():
                            result = json.loads(line).get("result", {}) if line.strip() else {}
                            if result.get("created"):
                                broken = False
                                if not started:
                                    started = True
                                    task_status.started()
                            if result.get("compact_revision"):  # history gone: resume after
                                body["start_revision"] = result["compact_revision"]
                            for event in result.get("events") or []:
                                body["start_revision"] = str(int(event["kv"]["mod_revision"]) + 1)
                                if event.get("type") == "DELETE":
                                    try:
                                        sessions.try_send(_unb64(event["kv"]["key"])[len(start) :])
                                    except SendError:
                                        return  # nobody listens any more
                    finally:
                        with trio.CancelScope(shield=True):
                            await response.aclose()
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    if not broken:  # once per outage, not once per retry
                        logger.warning(
                            "host %s: ownership watch on %s broke (%r); reopening",
                            self.host_id,
                            endpoint,
                            exc,
                        )
                    broken = True
                    self._good = (self._good + 1) % len(self.endpoints)
                await trio.sleep(0.5)

    async def orphaned(self) -> list[str]:
        """Sessions with a record and no live owner (their host's lease ended)."""
        start = self._dir("owner")
        kvs = await self._range(start, prefix=True, keys_only=True)
        owners = {_unb64(kv["key"])[len(start) :] for kv in kvs}
        return [session for session in await self.sessions() if session not in owners]

    async def identity(self) -> str:
        """The store's id: created by the first daemon that asks (one transaction, create if
        absent), then read; every host of the store shares it."""
        if self._identity is None:
            key, fresh = self._key("store-id"), uuid.uuid4().hex[:16]
            answer = await self._txn(
                [{"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                [self._put(key, fresh)],
                [{"request_range": {"key": _b64(key)}}],
            )
            kv = None if answer.get("succeeded") else _kv(answer["responses"][0])
            self._identity = fresh if kv is None else _unb64(kv["value"])
        return self._identity

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Nothing to hold: each host's lease and host id keep daemons apart (ADR 0018)."""
        await trio.lowlevel.checkpoint()
        yield

    async def revoke(self) -> None:
        """End this host's lease now, so every session it owns is free at once (a daemon
        that stops its harnesses does this; one that leaves them running lets the lease
        expire, so a restart within the TTL keeps its sessions)."""
        lease, self._lease = self._lease, None
        self._lease_until = -math.inf
        self._owned.clear()
        self._revoked = True
        if lease is not None:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})

    async def aclose(self) -> None:
        """Close the HTTP client; the lease is left to expire (``revoke`` ends it now)."""
        if self._client is not None:
            client, self._client = self._client, None
            with trio.CancelScope(shield=True):
                await client.aclose()

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
    }
