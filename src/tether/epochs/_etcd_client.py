"""``EtcdClient``: etcd's v3 JSON gateway over httpx, with failover between members and a bound
on every call; the key and transaction helpers every etcd part shares.

Each call goes to the first endpoint that answers, starting with the last good one. A refusal
(a non-retryable error that etcd answers) is an ``EtcdRefused`` carrying etcd's gRPC code, so
a caller recognises one by its code, never by its text.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Sequence
from typing import Any

import httpx
import trio

from .. import _backend
from ._store import StoreUnavailable

RETRYABLE = frozenset({4, 14})
"""gRPC codes worth another endpoint: deadline exceeded, unavailable (no leader, a restart)."""
NOT_FOUND = 5
"""gRPC code etcd answers for a put on a lease it does not have (``ErrLeaseNotFound``)."""
UNAUTHENTICATED = 16
"""gRPC code for a missing, wrong or expired auth token."""
AUTHENTICATE = "/v3/auth/authenticate"
CONCURRENCY = 32
"""Calls in flight per client: more wait for a turn (within their bound) rather than queue in
httpx's pool, where the per-attempt timer would run while nothing is sent."""
LEASE_CONCURRENCY = 4
"""Calls in flight for the host lease (grant, keepalive, the host id check), on turns of
their own: a thousand bumps queued for their turn must not starve the lease that makes the
host the owner of what they bump."""


class EtcdRefused(StoreUnavailable):
    """etcd answered, and refused the request; ``code`` is its gRPC code (``None`` if it gave
    none)."""

    def __init__(self, endpoints: str, error: str, code: int | None) -> None:
        super().__init__(endpoints, error)
        self.code = code

    def __reduce__(self) -> tuple[type[EtcdRefused], tuple[str, str, int | None]]:  # type: ignore[override]
        return type(self), (self.endpoints, self.error, self.code)


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


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def prefix_end(key: str) -> str:
    """The range end that makes a range over ``key`` a range over every key starting with it."""
    raw = bytearray(key.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


def first_kv(response: dict[str, Any]) -> dict[str, Any] | None:
    """The single key-value of a range response, or ``None``."""
    kvs = response.get("response_range", response).get("kvs") or []
    return kvs[0] if kvs else None


def revision(kv: dict[str, Any] | None) -> str:
    return "0" if kv is None else str(kv.get("mod_revision", "0"))


def same_revision(key: str, rev: str) -> dict[str, Any]:
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev}


def absent(key: str) -> dict[str, Any]:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def put(key: str, value: str, lease: int | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease is not None:
        request["lease"] = str(lease)
    return {"request_put": request}


def get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


class EtcdClient:
    """The members at ``endpoints``, every call bounded by ``timeout`` across all of them."""

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout: float,
        *,
        cacert: str | None = None,
        cert: tuple[str, str] | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("name at least one etcd endpoint")
        if (user is None) != (password is None):
            raise ValueError("an etcd user needs a password, and a password a user")
        scheme = "https" if cacert is not None or cert is not None else "http"
        self.endpoints = tuple(e if "://" in e else f"{scheme}://{e}" for e in endpoints)
        self.timeout = timeout
        self.good = 0
        """The endpoint that answered last, tried first."""
        self._verify: ssl.SSLContext | bool = True
        if cacert is not None or cert is not None:
            self._verify = ssl.create_default_context(cafile=cacert)
            if cert is not None:
                self._verify.load_cert_chain(*cert)
        self._user, self._password = user, password
        self._token: str | None = None
        self._authenticating = trio.Lock()
        self._http: httpx.AsyncClient | None = None
        self._limiter = trio.CapacityLimiter(CONCURRENCY)
        self._lease_limiter = trio.CapacityLimiter(LEASE_CONCURRENCY)

    def where(self) -> str:
        return ",".join(self.endpoints)

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=min(1.0, self.timeout)),
                verify=self._verify,
            )
        return self._http

    def request(
        self, endpoint: str, path: str, body: dict[str, Any], timeout: httpx.Timeout | None = None
    ) -> httpx.Request:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self._token is not None and path != AUTHENTICATE:
            headers["Authorization"] = self._token
        request = self.http().build_request(
            "POST",
            endpoint + path,
            content=data,
            headers=headers,
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )
        request.stream = _Body(data)
        return request

    async def authenticated(self) -> None:
        """Hold an auth token if this client has a user (etcd's ``/v3/auth/authenticate``);
        one task asks, the others wait for its answer.

        Raises:
            EtcdRefused: wrong user or password.
            StoreUnavailable: no endpoint answered.
        """
        if self._user is None or self._token is not None:
            return
        async with self._authenticating:
            if self._token is None:
                body = {"name": self._user, "password": self._password}
                # Not through ``call``: its callers hold the limiter's slots while they wait here.
                deadline = trio.current_time() + self.timeout
                answer = await self._attempts(AUTHENTICATE, body, self.timeout, deadline)
                self._token = str(answer.get("token") or "")

    async def call(
        self, path: str, body: dict[str, Any], *, bound: float | None = None, lease: bool = False
    ) -> dict[str, Any]:
        """POST ``body`` to the first endpoint that answers within ``bound`` seconds (default:
        the client's ``timeout``).

        At most ``CONCURRENCY`` calls are in flight; the others wait their turn within their
        bound. A call for the host lease (``lease=True``) waits for a turn of its own among
        ``LEASE_CONCURRENCY``, so no backlog of other calls delays a keepalive. Each attempt
        gets a third of the bound, so a member that hangs (it lost its leader, or forwards to
        a dead one) costs one attempt, not the whole call; rounds over the endpoints repeat
        until the bound unless every endpoint refused the connection. Retrying is safe for
        every call tether makes: writes are compare-and-swap or create-if-absent, and a
        duplicated lease grant expires unused.

        Raises:
            EtcdRefused: etcd answered and refused (its gRPC code attached).
            StoreUnavailable: no endpoint answered within the bound.
            UnsupportedBackend: called under asyncio.
        """
        if not _backend.on_trio():
            raise _backend.UnsupportedBackend(
                "EtcdEpochStore runs under trio only for now; under asyncio, SqliteEpochStore"
                " keeps epochs, records and the outbox on one host"
            )
        bound = self.timeout if bound is None else min(bound, self.timeout)
        deadline = trio.current_time() + bound
        limiter = self._lease_limiter if lease else self._limiter
        with trio.move_on_at(deadline) as waiting:
            await limiter.acquire()
        if waiting.cancelled_caught:
            busy = f"{limiter.total_tokens:g} calls busy"
            raise StoreUnavailable(self.where(), f"no free connection within {bound:g}s ({busy})")
        try:
            if path != AUTHENTICATE:
                await self.authenticated()
            try:
                return await self._attempts(path, body, bound, deadline)
            except EtcdRefused as exc:
                if exc.code != UNAUTHENTICATED or self._user is None or path == AUTHENTICATE:
                    raise
            self._token = None  # it expired (etcd's --auth-token-ttl): ask again, once
            await self.authenticated()
            return await self._attempts(path, body, bound, deadline)
        finally:
            limiter.release()

    async def _attempts(
        self, path: str, body: dict[str, Any], bound: float, deadline: float
    ) -> dict[str, Any]:
        errors: dict[str, str] = {}
        while True:
            refused = 0
            for step in range(len(self.endpoints)):
                index = (self.good + step) % len(self.endpoints)
                endpoint = self.endpoints[index]
                left = deadline - trio.current_time()
                if left <= 0:
                    errors["bound"] = f"no answer within {bound:g}s"
                    raise StoreUnavailable(self.where(), "; ".join(errors.values()))
                cap = min(left, max(0.5, bound / 3))
                with trio.move_on_after(cap) as attempt:
                    try:
                        response = await self.http().send(self.request(endpoint, path, body))
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
                    self.good = index
                    return dict(data)
                message = data.get("message") or data.get("error") or response.text
                code = data.get("code")
                if code in RETRYABLE or response.status_code >= 500:
                    errors[endpoint] = f"{endpoint}: {message}"
                    continue
                raise EtcdRefused(
                    self.where(), f"{path} refused: {message}", code if type(code) is int else None
                )
            if refused == len(self.endpoints):
                raise StoreUnavailable(self.where(), "; ".join(errors.values()))
            await trio.sleep(min(0.1, max(0.0, deadline - trio.current_time())))

    async def range(
        self, key: str, *, prefix: bool = False, keys_only: bool = False
    ) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"key": b64(key), "keys_only": keys_only}
        if prefix:
            body["range_end"] = prefix_end(key)
        return list((await self.call("/v3/kv/range", body)).get("kvs") or [])

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
        *,
        lease: bool = False,
    ) -> dict[str, Any]:
        body = {"compare": compare, "success": success, "failure": failure or []}
        return await self.call("/v3/kv/txn", body, lease=lease)

    async def read(self, *keys: str, lease: bool = False) -> list[dict[str, Any] | None]:
        """The keys' values at one revision (a read-only transaction)."""
        answer = await self.txn([], [get(key) for key in keys], lease=lease)
        return [first_kv(response) for response in answer.get("responses", [])]

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            with trio.CancelScope(shield=True):
                await http.aclose()


class Keys:
    """Where a store's keys live, under ``prefix`` (several deployments can share a cluster)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.rstrip("/") + "/"

    def dir(self, kind: str) -> str:
        return f"{self.prefix}{kind}/"

    def key(self, kind: str, *parts: str) -> str:
        for part in parts:
            if not part or "/" in part:
                raise ValueError(f"{kind} name {part!r}: must be non-empty without '/'")
        return self.prefix + "/".join((kind, *parts))
