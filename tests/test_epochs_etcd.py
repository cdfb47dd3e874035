"""EtcdEpochStore on real etcd clusters: host ownership on leases, expiry never resetting an
epoch, the ownership watch, bounded failure when etcd is unreachable or has lost quorum."""

from __future__ import annotations

import logging
import math
import uuid

import pytest
import trio

from etcd_cluster import Cluster
from helpers import wait_until
from tether import channel
from tether.epochs import (
    EtcdEpochStore,
    HostIdInUse,
    LeasedEpochStore,
    OwnedElsewhere,
    QueuedPrompt,
    SessionRecord,
    StoreUnavailable,
)


def _store(cluster: Cluster, host: str, prefix: str, **kwargs: float) -> EtcdEpochStore:
    return EtcdEpochStore(cluster.endpoints, prefix=prefix, host_id=host, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def prefix() -> str:
    return f"/test-{uuid.uuid4().hex}"


async def test_a_live_owner_keeps_other_hosts_from_bumping(
    etcd_cluster: Cluster, prefix: str
) -> None:
    a, b = _store(etcd_cluster, "a", prefix), _store(etcd_cluster, "b", prefix)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.keep_alive)
        assert await a.bump("s") == 1
        assert await a.owner("s") == "a"
        with pytest.raises(OwnedElsewhere, match="session 's' is owned by host 'a'") as caught:
            await b.bump("s")
        assert caught.value.host == "a"
        assert await a.bump("s") == 2, "the owner bumps its own session"
        await a.save("s", SessionRecord(state="running", host="a"), epoch=2)
        with pytest.raises(OwnedElsewhere):
            await b.save("s", SessionRecord(state="stopped", host="b"), epoch=2)
        assert await b.record("s") == SessionRecord(state="running", host="a", epoch=2)
        nursery.cancel_scope.cancel()
    await a.revoke()  # its ownership keys go at once
    await a.aclose()
    assert await b.owner("s") is None
    assert await b.bump("s") == 3, "the epoch survived its owner's lease"
    assert await b.owner("s") == "b"
    await b.aclose()


async def test_a_lease_expiry_frees_the_session_but_never_resets_its_epoch(
    etcd_cluster: Cluster, prefix: str
) -> None:
    a = _store(etcd_cluster, "a", prefix, lease_ttl=2)
    b = _store(etcd_cluster, "b", prefix)
    assert await a.bump("s") == 1  # no keep_alive: the lease lives 2 s
    assert a.lease_held()
    with trio.fail_after(10):
        while await b.owner("s") is not None:
            await trio.sleep(0.1)
    assert not a.lease_held(), "etcd expired a lease this host still believed held"
    assert await b.current("s") == 1
    assert await b.orphaned() == []  # no record was saved
    assert await b.bump("s") == 2
    await a.aclose()
    await b.aclose()


async def test_released_reports_each_session_whose_owner_went(
    etcd_cluster: Cluster, prefix: str
) -> None:
    a, b = _store(etcd_cluster, "a", prefix), _store(etcd_cluster, "b", prefix)
    await a.bump("s1")
    await a.bump("s2")
    seen: list[str] = []
    sender, released = channel(str, math.inf)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.watch_released, sender)
        await a.revoke()
        with trio.fail_after(10):
            async for session in released:
                seen.append(session)
                if len(seen) == 2:
                    break
        nursery.cancel_scope.cancel()
    assert sorted(seen) == ["s1", "s2"]
    await a.aclose()
    await b.aclose()


async def test_unreachable_endpoints_fail_fast_naming_them() -> None:
    store = EtcdEpochStore(["127.0.0.1:9", "127.0.0.1:7"], host_id="a", timeout=1.0)
    started = trio.current_time()
    with pytest.raises(StoreUnavailable) as caught:
        await store.bump("s")
    assert trio.current_time() - started < 1.5
    assert caught.value.endpoints == "http://127.0.0.1:9,http://127.0.0.1:7"
    assert "127.0.0.1:9: ConnectError" in str(caught.value)
    await store.aclose()


async def test_one_member_down_bumps_go_on_two_down_fail_within_the_bound(
    own_etcd_cluster: Cluster, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(own_etcd_cluster, "a", prefix, lease_ttl=3, timeout=2.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_alive)
        assert await store.bump("s") == 1
        await trio.to_thread.run_sync(own_etcd_cluster.kill, "m0")  # the first endpoint
        assert [await store.bump("s") for _ in range(3)] == [2, 3, 4]
        await trio.to_thread.run_sync(own_etcd_cluster.kill, "m1")
        for operation in (store.bump("s"), store.current("s")):
            started = trio.current_time()
            with pytest.raises(StoreUnavailable):
                await operation
            assert trio.current_time() - started < 2.5, "an operation outlived its bound"
        with caplog.at_level(logging.ERROR, "tether.epochs"):
            await wait_until(lambda: not store.lease_held(), timeout=3 + 2)
        await wait_until(lambda: "host a lost its lease" in caplog.text, timeout=3)
        await trio.to_thread.run_sync(own_etcd_cluster.revive, "m0", "m1")
        await wait_until(store.lease_held, timeout=20)
        assert await store.owner("s") == "a", "the session was not hung on the new lease"
        # The refused bump may still commit once quorum returns (etcd kept it in its log):
        # StoreUnavailable promises nothing about the effect, only that epochs keep growing.
        assert await store.bump("s") in (5, 6)
        nursery.cancel_scope.cancel()
    await store.aclose()


async def test_a_restarted_daemon_claims_its_sessions_unless_taken_over(
    etcd_cluster: Cluster, prefix: str
) -> None:
    before = _store(etcd_cluster, "a", prefix)
    assert isinstance(before, LeasedEpochStore)
    epoch = await before.bump("kept")
    taken = await before.bump("taken")
    # The daemon restarts: a new store, a new lease; the old lease still holds both.
    after, other = _store(etcd_cluster, "a", prefix), _store(etcd_cluster, "b", prefix)
    assert await after.claim("kept", epoch), "its own session, moved to its new lease"
    assert not await after.claim("kept", epoch - 1), "an epoch that is not current"
    await before.revoke()  # the old lease ends: "taken" is free, "kept" is not
    with pytest.raises(OwnedElsewhere):
        await other.bump("kept")
    assert await other.bump("taken") == taken + 1
    assert not await after.claim("taken", taken), "another host bumped it meanwhile"
    assert await other.owner("taken") == "b"
    for store in (before, after, other):
        await store.revoke()
        await store.aclose()


async def test_a_second_daemon_with_the_same_host_id_makes_the_first_stand_down(
    etcd_cluster: Cluster, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The newer daemon wins (a restarted one must); the older one notices at its next
    keepalive, loses its lease at once and refuses every call from then on."""
    ttl = 2
    first = _store(etcd_cluster, "dup", prefix, lease_ttl=ttl, timeout=1.0)
    second = _store(etcd_cluster, "dup", prefix, lease_ttl=ttl, timeout=1.0)
    stood_down: list[HostIdInUse] = []

    async def hold(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await first.keep_alive(task_status=task_status)
        except HostIdInUse as exc:
            stood_down.append(exc)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(hold)
            epoch = await first.bump("s")
            await nursery.start(second.keep_alive)  # started with the same --host-id
            await wait_until(lambda: bool(stood_down), timeout=ttl / 3 + 2 * first.timeout + 1)
            assert stood_down[0].host == "dup"
            assert not first.lease_held()
            with pytest.raises(HostIdInUse, match="host id 'dup' was taken by another daemon"):
                await first.bump("s")
            assert await second.claim("s", epoch), "the newer daemon keeps the id's sessions"
            assert await second.bump("s") == epoch + 1
            assert second.lease_held()
            nursery.cancel_scope.cancel()
        assert "host dup: host id 'dup' was taken by another daemon" in caplog.text
    finally:
        for store in (first, second):
            await store.revoke()
            await store.aclose()


async def test_a_settled_prompt_leaves_the_outbox_and_its_outcome_expires(
    etcd_cluster: Cluster, prefix: str
) -> None:
    """The outbox holds only what is pending (``pending`` reads no history), and a settled
    outcome, which keeps a retried enqueue of its id a no-op, is dropped by etcd after
    ``keep_settled``: etcd does not fill up with every prompt ever queued."""
    store = _store(etcd_cluster, "a", prefix, keep_settled=2)
    try:
        for n in range(5):
            await store.enqueue(QueuedPrompt("s", f"p{n}", "hello"))
        for n in range(4):
            await store.settle("s", f"p{n}", "delivered")
        outbox = await store.client.range(store.keys.dir("outbox"), prefix=True, keys_only=True)
        assert len(outbox) == 1, "settled prompts stayed in the outbox"
        await store.enqueue(QueuedPrompt("s", "p0", "a retry"))
        assert [p.id for p in await store.pending()] == ["p4"]

        async def requeued() -> bool:
            await store.enqueue(QueuedPrompt("s", "p0", "a retry"))
            return len(await store.pending()) == 2

        with trio.fail_after(2 + 3):
            while not await requeued():
                await trio.sleep(0.1)
        settled = await store.client.range(store.keys.dir("settled"), prefix=True, keys_only=True)
        assert settled == [], "outcomes outlived keep_settled"
    finally:
        await store.aclose()


async def test_a_settle_survives_etcd_losing_the_retention_lease(
    etcd_cluster: Cluster, prefix: str
) -> None:
    """etcd refuses a put on a lease it lost (a restore from a snapshot) with gRPC code 5;
    the outbox knows that refusal by its code, grants a new retention lease and settles."""
    store = _store(etcd_cluster, "a", prefix)
    try:
        await store.enqueue(QueuedPrompt("s", "p1", "hello"))
        await store.enqueue(QueuedPrompt("s", "p2", "hello"))
        await store.settle("s", "p1", "delivered")  # grants the retention lease
        retention = store.outbox._retention
        assert retention is not None
        await store.client.call("/v3/lease/revoke", {"ID": str(retention[0])})
        await store.settle("s", "p2", "delivered")
        assert await store.pending() == []
        assert store.outbox._retention is not None
        assert store.outbox._retention[0] != retention[0]
    finally:
        await store.aclose()


async def test_a_host_that_slept_past_its_ttl_knows_its_lease_is_gone(
    etcd_cluster: Cluster, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Suspension is simulated by moving the boot-time clock (which counts it) forward."""
    from tether import _util

    store = _store(etcd_cluster, "a", prefix, lease_ttl=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_alive)
        assert store.lease_held()
        real = _util.boottime
        monkeypatch.setattr(_util, "boottime", lambda: real() + 4)
        assert not store.lease_held(), "a sleep longer than the TTL went unnoticed"
        # The next keepalive finds the lease alive (etcd never slept).
        await wait_until(store.lease_held, timeout=3)
        nursery.cancel_scope.cancel()
    await store.revoke()
    await store.aclose()


async def test_six_hundred_concurrent_calls_wait_their_turn_instead_of_failing(
    etcd_cluster: Cluster, prefix: str
) -> None:
    """More calls than connections: each waits for a turn (within its bound, here 10 s for a
    slow machine) instead of timing out while queued in httpx's pool."""
    store = _store(etcd_cluster, "a", prefix, timeout=10.0)
    epochs: dict[str, int] = {}

    async def bump(name: str) -> None:
        epochs[name] = await store.bump(name)

    async with trio.open_nursery() as nursery:
        for i in range(600):
            nursery.start_soon(bump, f"s{i}")
    assert sorted(epochs.values()) == [1] * 600
    await store.revoke()
    await store.aclose()


async def test_grouped_bumps_keep_every_rule_of_a_single_bump(
    etcd_cluster: Cluster, prefix: str
) -> None:
    """Concurrent bumps share transactions (up to 64 sessions each): a session named twice
    gets two epochs, one owned by another host is refused alone, and a second writer racing
    on the same sessions never makes two bumps issue the same epoch."""
    a, b = _store(etcd_cluster, "a", prefix, timeout=20.0), _store(etcd_cluster, "b", prefix)
    assert await b.bump("theirs") == 1
    a_epochs: dict[str, list[int]] = {}
    refused: list[str] = []

    async def bump(store: EtcdEpochStore, name: str) -> None:
        try:
            epoch = await store.bump(name)
        except OwnedElsewhere as exc:
            refused.append(f"{store.host_id}:{exc.session}")
        else:
            a_epochs.setdefault(name, []).append(epoch)

    names = [f"s{i}" for i in range(150)]
    bumps = [*names, "s7", "s7", "theirs", *names[:40]]
    async with trio.open_nursery() as nursery:
        for name in bumps:
            nursery.start_soon(bump, a, name)
    assert refused == ["a:theirs"]
    for name in names:
        assert sorted(a_epochs[name]) == list(range(1, bumps.count(name) + 1)), name
        assert await a.current(name) == bumps.count(name)
    assert await a.owner("s0") == "a"
    # Two bumps of one host race a third host's on one session: no epoch is issued twice.
    await a.revoke()
    c = _store(etcd_cluster, "a", prefix, timeout=20.0)
    issued: list[int] = []

    async def race(store: EtcdEpochStore) -> None:
        for _ in range(10):
            try:
                issued.append(await store.bump("contested"))
            except OwnedElsewhere:
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for store in (c, c, b):
            nursery.start_soon(race, store)
    assert len(issued) == len(set(issued)), f"an epoch was issued twice: {sorted(issued)}"
    for store in (a, b, c):
        await store.aclose()


@pytest.mark.slow  # five thousand reads: ~20 s on 2 cores
async def test_a_backlog_of_calls_does_not_starve_the_host_lease(
    etcd_cluster: Cluster, prefix: str
) -> None:
    """Five thousand reads queued for the client's 32 turns take seconds to drain; the lease's
    keepalives have turns of their own, so the host keeps its lease (and its sessions)."""
    store = _store(etcd_cluster, "a", prefix, lease_ttl=3, timeout=60.0)
    lost: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_alive)
        assert await store.bump("s") == 1

        async def watch() -> None:
            while True:
                if not store.lease_held():
                    lost.append(trio.current_time())
                await trio.sleep(0.05)

        nursery.start_soon(watch)
        async with trio.open_nursery() as backlog:
            for i in range(5_000):
                backlog.start_soon(store.current, f"s{i % 50}")
        # A keepalive confirmed after the backlog, too: the lease's end moves later.
        ends = trio.current_time() + store.lease_remaining()
        await wait_until(lambda: trio.current_time() + store.lease_remaining() > ends + 0.1)
        nursery.cancel_scope.cancel()
    assert lost == [], "the lease was lost behind the backlog"
    assert await store.owner("s") == "a"
    await store.revoke()
    await store.aclose()
