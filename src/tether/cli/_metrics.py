"""``tether agentd --metrics HOST:PORT``: Prometheus metrics, formatted by the maintained
``prometheus-client`` (the ``metrics`` extra) and served by a small HTTP server in the
daemon's own trio run, so every scrape reads the daemon's state from the thread that owns it.

Metrics: ``tether_sessions{state}``, ``tether_restarts``, ``tether_deliveries_total{outcome}``,
``tether_delivery_seconds`` (a histogram), ``tether_heartbeat_age_seconds{session}``,
``tether_stalled_silence_seconds{session}`` and ``tether_lease_held``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from ..agentd import Agentd
from ..agentd._counts import BUCKETS
from ._errors import EX_UNAVAILABLE, EX_USAGE, CliError

logger = logging.getLogger("tether.cli")

MAX_REQUEST = 8192


def metrics_server(agentd: Agentd, where: str) -> Callable[[], Awaitable[None]]:
    """The task that serves ``/metrics`` at ``where`` (``HOST:PORT``) until cancelled; checked
    now, so a daemon that cannot serve them never starts.

    Raises:
        CliError: ``prometheus-client`` is not installed (69), or ``where`` is no address (64).
    """
    try:
        from prometheus_client import CollectorRegistry, generate_latest
    except ImportError as exc:
        raise CliError(
            EX_UNAVAILABLE, f"--metrics needs: pip install 'tether[metrics]' ({exc})"
        ) from None
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(EX_USAGE, f"--metrics wants HOST:PORT, not {where!r}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(agentd))

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            with trio.move_on_after(5):
                while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST:
                    chunk = await stream.receive_some(1024)
                    if not chunk:
                        return
                    head += chunk
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            if path.split(b"?")[0] != b"/metrics":
                await _send(stream, b"404 Not Found", b"try /metrics\n")
                return
            await _send(stream, b"200 OK", generate_latest(registry))

    async def serve() -> None:
        listeners = await trio.open_tcp_listeners(int(port), host=host)
        logger.info("metrics at http://%s/metrics", where)
        await trio.serve_listeners(answer, listeners)

    return serve


async def _send(stream: trio.SocketStream, status: bytes, body: bytes) -> None:
    head = (
        b"HTTP/1.0 " + status + b"\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
    )
    try:
        with trio.move_on_after(5):
            await stream.send_all(head + body)
    except trio.BrokenResourceError:
        pass


class _Collector:
    """Reads the daemon at each scrape (in its trio thread)."""

    def __init__(self, agentd: Agentd) -> None:
        self.agentd = agentd

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        rows = self.agentd.status()
        states = collections.Counter(str(row.state) for row in rows)
        sessions = GaugeMetricFamily("tether_sessions", "Sessions by state", labels=["state"])
        for state, count in sorted(states.items()):
            sessions.add_metric([state], count)
        yield sessions
        yield GaugeMetricFamily(
            "tether_restarts", "Restarts of every session", value=sum(r.restarts for r in rows)
        )
        counts = self.agentd.counts
        deliveries = CounterMetricFamily(
            "tether_deliveries", "Prompts delivered or failed", labels=["outcome"]
        )
        deliveries.add_metric(["delivered"], counts.delivered)
        deliveries.add_metric(["failed"], counts.failed)
        yield deliveries
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts.latency_buckets, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "tether_delivery_seconds", "From queued to read by the harness's loop",
            buckets=buckets, sum_value=counts.latency_sum,
        )  # fmt: skip
        age = GaugeMetricFamily(
            "tether_heartbeat_age_seconds", "Since the harness last answered a ping",
            labels=["session"],
        )  # fmt: skip
        silent = GaugeMetricFamily(
            "tether_stalled_silence_seconds", "Silence of a stalled turn or tool",
            labels=["session"],
        )  # fmt: skip
        for row in rows:
            if row.heartbeat_age is not None:
                age.add_metric([row.session], row.heartbeat_age)
            if row.state == "stalled" and row.silence is not None:
                silent.add_metric([row.session], row.silence)
        yield age
        yield silent
        yield GaugeMetricFamily(
            "tether_lease_held", "Whether this daemon knows it owns its sessions",
            value=1.0 if self.agentd.confirmed() else 0.0,
        )  # fmt: skip
