"""``watch_released``: the sessions whose owner's lease ends, from etcd's watch on the owner
keys, reopened on the next member from the last revision seen whenever it breaks."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import httpx
import trio

from ..channels import Sender, SendError
from ._etcd_client import EtcdClient, Keys, b64, prefix_end, unb64
from ._store import StoreUnavailable

logger = logging.getLogger("tether.epochs")


async def watch_released(
    client: EtcdClient,
    keys: Keys,
    host_id: str,
    sessions: Sender[str],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Send each session whose owner key is deleted (its lease expired or was revoked) to
    ``sessions`` until cancelled; started once etcd's watch is in place. A broken watch is
    reopened on the next endpoint from the revision after the last event seen, so no release
    is missed while etcd keeps its history; the sender is closed on return.

    Raises:
        StoreUnavailable: no endpoint answered before the watch was first in place.
    """
    start = keys.dir("owner")
    body: dict[str, Any] = {"key": b64(start), "range_end": prefix_end(start)}
    with sessions:
        await client.range(keys.key("owner", "-"))  # an endpoint that answers, or raise
        started = broken = False
        while True:
            endpoint = client.endpoints[client.good]
            # A token that expired meanwhile is asked again; if that fails, so does the watch
            # below, and it is retried like any broken watch.
            with contextlib.suppress(StoreUnavailable):
                await client.authenticated()
            request = client.request(
                endpoint,
                "/v3/watch",
                {"create_request": body},
                httpx.Timeout(client.timeout, read=None),
            )
            try:
                response = await client.http().send(request, stream=True)
                try:
                    # Nothing in this loop may wait: httpx's line iterator must only ever be
                    # interrupted inside itself, where it unwinds (ADR 0017).
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
                                    sessions.try_send(unb64(event["kv"]["key"])[len(start) :])
                                except SendError:
                                    return  # nobody listens any more
                finally:
                    with trio.CancelScope(shield=True):
                        await response.aclose()
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                if not broken:  # once per outage, not once per retry
                    logger.warning(
                        "host %s: ownership watch on %s broke (%r); reopening",
                        host_id,
                        endpoint,
                        exc,
                    )
                broken = True
                client.good = (client.good + 1) % len(client.endpoints)
            await trio.sleep(0.5)
