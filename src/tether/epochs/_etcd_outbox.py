"""``EtcdOutbox``: the queue of prompts on etcd, and their settled outcomes on a retention
lease, so the outbox holds only what is pending and etcd does not fill up (ADR 0019)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import trio

from .. import _util
from ._etcd_client import EtcdClient, Keys, absent, b64, put, revision, same_revision, unb64
from ._etcd_lease import lease_not_found
from ._store import QueuedPrompt, StoreUnavailable


class EtcdOutbox:
    """``outbox/<session>/<id>`` holds a queued prompt; ``settled/<session>/<id>`` its outcome
    for ``keep_settled`` seconds."""

    def __init__(self, client: EtcdClient, keys: Keys, keep_settled: int) -> None:
        self.client = client
        self.keys = keys
        self.keep_settled = keep_settled
        self._retention: tuple[int, float] | None = None
        """The lease settled outcomes hang on, and when it was granted (boot time)."""
        self._retention_lock = trio.Lock()

    def _queued(self, session: str, prompt_id: str) -> str:
        return self.keys.key("outbox", session, quote(prompt_id, safe=""))

    def _settled(self, session: str, prompt_id: str) -> str:
        return self.keys.key("settled", session, quote(prompt_id, safe=""))

    async def enqueue(self, prompt: QueuedPrompt) -> None:
        """Queue ``prompt`` unless its id is already queued, or was settled within
        ``keep_settled``, for the session (one transaction: both keys absent)."""
        key = self._queued(prompt.session, prompt.id)
        value = json.dumps(
            {"text": prompt.text, "meta": prompt.meta, "attempts": prompt.attempts, "outcome": None}
        )
        both = [absent(key), absent(self._settled(prompt.session, prompt.id))]
        await self.client.txn(both, [put(key, value)])

    async def _update(
        self, session: str, prompt_id: str, change: Callable[[dict[str, Any]], None]
    ) -> None:
        """Read-modify-write one queued prompt, compare-and-swap on its revision."""
        key = self._queued(session, prompt_id)
        while True:
            kvs = await self.client.range(key)
            if not kvs:
                return
            item = json.loads(unb64(kvs[0]["value"]))
            change(item)
            answer = await self.client.txn(
                [same_revision(key, revision(kvs[0]))], [put(key, json.dumps(item))]
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
        key = self._queued(session, prompt_id)
        lease, renewed = await self._retain(), False
        while True:
            kvs = await self.client.range(key)
            if not kvs:
                return  # settled already (or never queued)
            delete = {"request_delete_range": {"key": b64(key)}}
            settled = put(self._settled(session, prompt_id), outcome, lease)
            try:
                answer = await self.client.txn(
                    [same_revision(key, revision(kvs[0]))], [delete, settled]
                )
            except StoreUnavailable as exc:
                if not lease_not_found(exc) or renewed:
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
                granted = await self.client.call("/v3/lease/grant", {"TTL": self.keep_settled})
                self._retention = (int(granted["ID"]), now)
            return self._retention[0]

    async def pending(self) -> list[QueuedPrompt]:
        """Every queued prompt without an outcome, oldest (first created) first."""
        start = self.keys.dir("outbox")
        kvs = sorted(
            await self.client.range(start, prefix=True), key=lambda kv: int(kv["create_revision"])
        )
        queued = []
        for kv in kvs:
            session, _, quoted = unb64(kv["key"])[len(start) :].partition("/")
            item = json.loads(unb64(kv["value"]))
            if item["outcome"] is None:
                queued.append(
                    QueuedPrompt(
                        session, unquote(quoted), item["text"], item["meta"], item["attempts"]
                    )
                )
        return queued
