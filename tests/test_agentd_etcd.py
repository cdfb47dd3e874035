"""agentd on a real etcd cluster: two daemons as two hosts, host loss and takeover, and a daemon
that has lost its lease refusing work and calling its sessions unconfirmed."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from etcd_cluster import Cluster, free_ports
from helpers import (
    QUICK_HARNESS,
    agentd_events,
    kill_marked,
    marked,
    python,
    reap_zombie_children,
    unique_session,
    wait_until,
)
from tether import Agentd, DeliveryFailed, Sender
from tether.epochs import EtcdEpochStore, QueuedPrompt, SessionRecord

TETHER = [sys.executable, "-m", "tether"]
TTL = 2
EXAMPLE = [sys.executable, "-m", "tether.harness.example"]
QUICK = python(QUICK_HARNESS)


class Host:
    """One ``tether agentd`` process acting as host ``name``, in a directory of its own."""

    def __init__(
        self, name: str, directory: Path, store: str, *extra: str, host_id: str | None = None
    ) -> None:
        self.name = name
        self.host_id = host_id or name
        self.directory = directory
        self.store = store
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(mode=0o700)

    @property
    def socket(self) -> Path:
        return self.directory / "agentd.sock"

    async def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        with open(self.directory / "agentd.log", "ab") as log:  # noqa: ASYNC230
            self.process = subprocess.Popen(
                [
                    *TETHER, "agentd", "--socket", str(self.socket), "--store", self.store,
                    "--host-id", self.host_id, "--lease-ttl", str(TTL), "--heartbeat", "0.2",
                    "--grace", "0.3", "--stop-harnesses", *self.extra,
                    "--", *python(QUICK_HARNESS),
                ],
                stdout=log,
                stderr=log,
                env={**os.environ, "TETHER_RECONNECT_FOR": "30"},
            )  # fmt: skip
        await wait_until(self.socket.exists, timeout=20)

    def kill(self) -> float:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        return time.time()

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            await trio.to_thread.run_sync(self.process.wait, 20)

    def reap(self) -> None:
        """SIGKILL the daemon if it still runs (a failed test's clean-up), and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    async def tether(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        create = ["--create"] if args[0] == "send" else []  # sessions start with a send here
        return await trio.run_process(
            [*TETHER, args[0], "--socket", str(self.socket), *create, *args[1:]],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    def events(self, session: str) -> list[dict[str, Any]]:
        return [dict(row, host=self.name) for row in agentd_events(self.directory, session)]


def never_two_attached(rows: list[dict[str, Any]], deaths: dict[str, float]) -> None:
    """Across hosts, in time order: an ``attached`` (or a ``confirmed`` after a lost lease)
    while another harness of the session is still attached fails; a harness stops being
    attached when its daemon says so (``unconfirmed`` included) or dies."""
    attached: set[tuple[str, int]] = set()
    timeline = sorted(
        [(row["at"], row["host"], row["kind"], row["pid"]) for row in rows]
        + [(at, host, "daemon_killed", 0) for host, at in deaths.items()]
    )
    for _, host, kind, pid in timeline:
        if kind in ("attached", "confirmed"):
            assert attached <= {(host, pid)}, f"{host} pid {pid} attached while {attached} were"
            attached.add((host, pid))
        elif kind in ("detached", "phantom", "superseded", "exited", "stopped", "unconfirmed"):
            attached.discard((host, pid))
        elif kind == "daemon_killed":
            attached = {k for k in attached if k[0] != host}


@pytest.fixture
def hosts(tmp_path: Path, etcd_cluster: Cluster) -> Iterator[tuple[Host, Host]]:
    tmp_path.chmod(0o700)
    store = f"etcd://{','.join(etcd_cluster.endpoints)}/test-{uuid.uuid4().hex}"
    a = Host("a", tmp_path / "a", store)
    b = Host("b", tmp_path / "b", store, "--adopt")
    yield a, b
    a.reap()
    b.reap()


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
async def test_a_lost_host_is_taken_over_and_its_harness_superseded_when_it_returns(
    hosts: tuple[Host, Host],
) -> None:
    a, b = hosts
    session = unique_session()
    try:
        await a.start()
        await b.start()
        sent = await a.tether("send", session, "before")
        assert sent.returncode == 0, sent.stderr
        first = json.loads(sent.stdout)
        assert first["epoch"] == 1
        refused = await b.tether("send", session, "not yours")
        assert refused.returncode == 75  # EX_TEMPFAIL: its owner's lease may end
        assert f"session {session!r} is owned by host 'a'" in refused.stderr.decode()
        refused = await b.tether("stop", session)
        assert f"session {session!r} is owned by host 'a'" in refused.stderr.decode()
        assert json.loads((await a.tether("ps", "--json")).stdout)["sessions"][0]["state"] == (
            "attached"
        )

        killed = a.kill()  # host a is lost; its harness lives on, orphaned
        old = psutil.Process(first["pid"])
        # A prompt host a had accepted and not yet delivered when it died.
        endpoints, _, prefix = a.store.removeprefix("etcd://").partition("/")
        shared = EtcdEpochStore(endpoints.split(","), prefix="/" + prefix, host_id="test")
        await shared.enqueue(QueuedPrompt(session, "left-behind", "accepted by a"))
        await shared.aclose()

        def taken_over() -> bool:
            return any(r["kind"] == "attached" and r["epoch"] > 1 for r in b.events(session))

        await wait_until(taken_over, timeout=TTL + 2 + 5)
        attached = next(r for r in b.events(session) if r["kind"] == "attached")
        takeover = next(r for r in b.events(session) if r["kind"] == "takeover")
        # The lease's end and the watch (TTL + 2), with 3 s for a loaded 2-core host: the
        # attach itself, a harness's start, took 4.1 s beside two CPU hogs and three workers.
        took = takeover["at"] - killed
        assert took <= TTL + 2 + 3, f"the takeover came {took:.2f}s after host a was lost"
        kinds = [r["kind"] for r in b.events(session)]
        assert kinds[kinds.index("takeover") :][:3] == ["takeover", "spawned", "attached"]
        delivered = await b.tether("send", session, "after")
        assert delivered.returncode == 0, delivered.stderr
        second = json.loads(delivered.stdout)
        assert (second["epoch"], second["pid"]) == (attached["epoch"], attached["pid"])
        await wait_until(
            lambda: any("prompt left-behind" in r["detail"] for r in b.events(session)
                        if r["kind"] == "delivered")
        )  # fmt: skip
        assert old.status() != psutil.STATUS_ZOMBIE, "host a's harness must outlive host a"

        await a.start()  # host a returns; its old harness reconnects and is refused
        code = await trio.to_thread.run_sync(old.wait, 20)
        assert code == 75, f"the superseded harness exited {code}"
        assert any(
            r["kind"] == "superseded" and r["pid"] == first["pid"] for r in a.events(session)
        )
        ps = json.loads((await a.tether("ps", "--json")).stdout)["sessions"]
        assert [(r["session"], r["state"]) for r in ps] == [(session, "elsewhere")]
        never_two_attached(a.events(session) + b.events(session), {"a": killed})
    finally:
        await a.stop()
        await b.stop()
        kill_marked(session)


async def test_a_daemon_whose_host_id_another_takes_exits_78(
    tmp_path: Path, etcd_cluster: Cluster
) -> None:
    """Two daemons given one ``--host-id``: the older stands down (exit 78, naming the id)
    instead of both serving its sessions; the newer serves them."""
    tmp_path.chmod(0o700)
    store = f"etcd://{','.join(etcd_cluster.endpoints)}/test-{uuid.uuid4().hex}"
    old, new = (Host(name, tmp_path / name, store, host_id="a") for name in ("old", "new"))
    session = unique_session()
    try:
        await old.start()
        sent = await old.tether("send", session, "before")
        assert sent.returncode == 0, sent.stderr
        await new.start()
        assert old.process is not None
        code = await trio.to_thread.run_sync(old.process.wait, TTL / 3 + 2 + 5)
        assert code == 78
        log = (old.directory / "agentd.log").read_text()
        (line,) = [row for row in log.splitlines() if row.startswith("tether agentd: ")]
        assert "host id 'a' was taken by another daemon" in line
        delivered = await new.tether("send", session, "after")
        assert delivered.returncode == 0, delivered.stderr
        assert json.loads(delivered.stdout)["epoch"] > json.loads(sent.stdout)["epoch"]
    finally:
        await old.stop()
        await new.stop()
        old.reap()
        new.reap()
        kill_marked(session)


async def test_without_quorum_the_daemon_refuses_work_and_confirms_nothing(
    tmp_path: Path, own_etcd_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path.chmod(0o700)
    session = unique_session()
    store = EtcdEpochStore(own_etcd_cluster.endpoints, host_id="solo", lease_ttl=TTL, timeout=1.0)
    agentd = Agentd(store, tmp_path / "agentd.sock", EXAMPLE, heartbeat=0.2, grace=0.3)
    try:
        async with agentd.running(stop_harnesses=True):
            attached = await agentd.start_agent(session)
            assert [row.state for row in agentd.status()] == ["attached"]
            await trio.to_thread.run_sync(own_etcd_cluster.kill, "m0")
            await trio.to_thread.run_sync(own_etcd_cluster.kill, "m1")
            await wait_until(lambda: not agentd.confirmed(), timeout=TTL + 1)
            assert [row.state for row in agentd.status()] == ["unconfirmed"]
            started = trio.current_time()
            with pytest.raises(DeliveryFailed, match="host solo lost its lease"):
                await agentd.deliver(session, "refused")
            assert trio.current_time() - started < 0.5
            await wait_until(
                lambda: any(e.kind == "unconfirmed" for e in _events(tmp_path, session))
            )
            os.kill(attached.pid, signal.SIGKILL)  # the daemon outlives a death it cannot record
            await wait_until(lambda: any(e.kind == "exited" for e in _events(tmp_path, session)))
            await wait_until(lambda: "record not saved: epoch store at" in caplog.text)
            assert [row.state for row in agentd.status()] == ["unconfirmed"]
            await trio.to_thread.run_sync(own_etcd_cluster.revive, "m0", "m1")
            await wait_until(agentd.confirmed, timeout=20)
            delivered = await agentd.deliver(session, "after")
            assert delivered.epoch > attached.epoch, "a fresh harness after the dead one"
    finally:
        await store.aclose()
        kill_marked(session)
        # The SIGKILLed harness's keeper went to the nearest subreaper, this test process,
        # which reaps it as init would.
        await wait_until(lambda: marked(session) == [] and reap_zombie_children())


class DeafStore(EtcdEpochStore):
    """An etcd store whose ownership watch hangs (a member that stops answering but keeps the
    stream open): it reports nothing. Counts the orphan scans."""

    scans = 0

    async def watch_released(
        self,
        sessions: Sender[str],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with sessions:
            task_status.started()
            await trio.sleep_forever()

    async def orphaned(self) -> list[str]:
        self.scans += 1
        return await super().orphaned()


@pytest.mark.slow  # 6 to 7 s here: make test-slow (and CI)
async def test_an_adopting_daemon_rescans_for_orphans_when_its_watch_hangs(
    tmp_path: Path, etcd_cluster: Cluster
) -> None:
    tmp_path.chmod(0o700)
    prefix = f"/test-{uuid.uuid4().hex}"
    live, stopped = unique_session(), unique_session()
    a_store = EtcdEpochStore(etcd_cluster.endpoints, prefix=prefix, host_id="a", lease_ttl=TTL)
    b_store = DeafStore(etcd_cluster.endpoints, prefix=prefix, host_id="b", lease_ttl=TTL)
    b = Agentd(b_store, tmp_path / "b.sock", EXAMPLE, heartbeat=0.2, grace=0.3, adopt=True)
    try:
        async with trio.open_nursery() as nursery:
            host_a = trio.CancelScope()

            async def hold_lease(task_status: trio.TaskStatus[None]) -> None:
                with host_a:
                    await a_store.keep_alive(task_status=task_status)

            await nursery.start(hold_lease)
            first = await a_store.bump(live)
            await a_store.save(live, SessionRecord(state="running"), epoch=first)
            done = await a_store.bump(stopped)
            await a_store.save(stopped, SessionRecord(state="stopped"), epoch=done)
            async with b.running(stop_harnesses=True):
                await wait_until(lambda: b_store.scans >= 2, timeout=2 * TTL + 2)
                assert b.attached() == {}, "host b took a session host a's live lease owns"
                host_a.cancel()
                await a_store.revoke()  # host a is gone; b's watch reports nothing
                await wait_until(lambda: live in b.attached(), timeout=TTL + 5)
                delivered = await b.deliver(live, "after the rescan")
                assert delivered.epoch > first
                scans = b_store.scans
                await wait_until(lambda: b_store.scans >= scans + 1, timeout=TTL + 2)
                assert stopped not in b.attached(), "a stopped session was started"
        kinds = [e.kind for e in _events(tmp_path, live)]
        assert kinds.count("takeover") == 1, kinds
        assert _events(tmp_path, stopped) == []
    finally:
        await a_store.aclose()
        await b_store.aclose()
        kill_marked(live)


def _events(directory: Path, session: str) -> list[Any]:
    from tether import AgentEvent

    return [AgentEvent.from_json(row) for row in agentd_events(directory, session)]


async def test_the_daemon_will_not_start_without_its_store(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    started = time.monotonic()
    result = await trio.run_process(
        [*TETHER, "agentd", "--socket", str(tmp_path / "a.sock"), "--store",
         "etcd://127.0.0.1:9,127.0.0.1:7", "--host-id", "a"],
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    assert result.returncode == 69
    assert time.monotonic() - started < 10
    error = result.stderr.decode()
    assert "tether agentd: cannot reach the store: epoch store at http://127.0.0.1:9," in error
    assert "ConnectError" in error
    assert "Traceback" not in error


class Proxy:
    """A TCP proxy in front of one etcd member that the test can cut (every connection
    dropped, new ones refused) and restore on the same port: a host cut off from etcd."""

    def __init__(self, target: str) -> None:
        host, port = target.split(":")
        self.target = (host, int(port))
        (self.port,) = free_ports(1)
        self._scope: trio.CancelScope | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self._scope:
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
            task_status.started()
            await trio.serve_listeners(self._relay, listeners)

    async def _relay(self, client: trio.SocketStream) -> None:
        async with (
            client,
            await trio.open_tcp_stream(*self.target) as server,
            trio.open_nursery() as nursery,
        ):

            async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    async for chunk in source:
                        await sink.send_all(chunk)
                nursery.cancel_scope.cancel()

            nursery.start_soon(pump, client, server)
            nursery.start_soon(pump, server, client)

    def cut(self) -> None:
        assert self._scope is not None
        self._scope.cancel()


async def test_a_host_cut_off_from_etcd_stops_first_and_is_superseded_when_back(
    tmp_path: Path, etcd_cluster: Cluster
) -> None:
    tmp_path.chmod(0o700)
    session = unique_session()
    prefix = f"/test-{uuid.uuid4().hex}"
    proxy = Proxy(etcd_cluster.endpoints[0])
    env = {**os.environ, "TETHER_RECONNECT_FOR": "30"}
    a_store = EtcdEpochStore(
        [proxy.endpoint], prefix=prefix, host_id="a", lease_ttl=TTL, timeout=1.0
    )
    b_store = EtcdEpochStore(etcd_cluster.endpoints, prefix=prefix, host_id="b", lease_ttl=TTL)
    (tmp_path / "a").mkdir(mode=0o700)
    (tmp_path / "b").mkdir(mode=0o700)
    a = Agentd(a_store, tmp_path / "a" / "s.sock", EXAMPLE, heartbeat=0.2, grace=0.3, env=env)
    b = Agentd(
        b_store, tmp_path / "b" / "s.sock", EXAMPLE, heartbeat=0.2, grace=0.3, env=env, adopt=True
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            async with a.running(stop_harnesses=True), b.running(stop_harnesses=True):
                first = await a.start_agent(session)
                proxy.cut()
                await wait_until(lambda: not a.confirmed(), timeout=TTL + 1)
                with pytest.raises(DeliveryFailed, match="host a lost its lease"):
                    await a.deliver(session, "refused while cut off")
                assert [row.state for row in a.status()] == ["unconfirmed"]
                await wait_until(lambda: session in b.attached(), timeout=TTL + 5)
                taken = await b.deliver(session, "on host b")
                assert taken.epoch > first.epoch
                assert psutil.pid_exists(first.pid), "host a kept its harness while cut off"

                await nursery.start(proxy.serve)  # host a reaches etcd again, same port

                def exited() -> list[str]:
                    return [e.detail for e in _events(tmp_path / "a", session)
                            if e.kind == "exited" and e.pid == first.pid]  # fmt: skip

                await wait_until(lambda: bool(exited()), timeout=20)
                assert exited() == ["code 75"], "host a's old harness did not exit 75"
                assert a.confirmed()
                with pytest.raises(DeliveryFailed, match="owned by host 'b'"):
                    await a.deliver(session, "not a's any more")
                nursery.cancel_scope.cancel()
        rows = [
            dict(row.to_json(), host=host)
            for host in ("a", "b")
            for row in _events(tmp_path / host, session)
        ]
        never_two_attached(rows, {})
        unconfirmed = min(r["at"] for r in rows if r["host"] == "a" and r["kind"] == "unconfirmed")
        takeover = min(r["at"] for r in rows if r["host"] == "b" and r["kind"] == "takeover")
        assert unconfirmed < takeover, "host b took the session before host a stopped"
    finally:
        await a_store.aclose()
        await b_store.aclose()
        kill_marked(session)


async def test_a_daemon_says_unconfirmed_the_moment_its_lease_runs_out(
    tmp_path: Path, etcd_cluster: Cluster
) -> None:
    """The refusal starts when the lease would run out, not at the next heartbeat (3 s
    here), and the ``unconfirmed`` event says so then: the event log shows the daemon
    stopping before another host could take over."""
    tmp_path.chmod(0o700)
    session = unique_session()
    proxy = Proxy(etcd_cluster.endpoints[0])
    store = EtcdEpochStore([proxy.endpoint], host_id="a", lease_ttl=TTL, timeout=0.5)
    agentd = Agentd(store, tmp_path / "a.sock", EXAMPLE, heartbeat=3.0, grace=0.3)
    deadline = math.inf
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            async with agentd.running(stop_harnesses=True):
                await agentd.start_agent(session)
                with agentd.subscribe() as events:
                    proxy.cut()
                    # The last deadline seen before the lease reads lost (a keepalive in
                    # flight at the cut may still have moved it).
                    with trio.fail_after(TTL + 2):
                        while (remaining := store.lease_remaining()) > 0:
                            deadline = trio.current_time() + remaining
                            await trio.sleep(0.005)
                    with trio.fail_after(1):
                        async for event in events:
                            if event.kind == "unconfirmed":
                                break
                late = trio.current_time() - deadline
                # Long before the next heartbeat (3 s), with headroom for a loaded host: 0.24 s
                # beside two CPU hogs (0.1 s was the bound; the daemon is one task of many).
                assert late < 1.0, f"unconfirmed {late:.3f}s after the lease ran out"
                nursery.start_soon(proxy.serve)  # etcd again, so the stop can revoke
                await wait_until(agentd.confirmed, timeout=TTL + 5)
                nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
        kill_marked(session)


def host_harnesses(session: str, host: str) -> list[psutil.Process]:
    """Live example harnesses of ``session`` started by the daemon of ``host``."""
    found = []
    for process in marked(session):
        try:
            if (
                process.environ().get("TETHER_HOST") == host
                and "tether.harness.example" in process.cmdline()
                and process.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(process)
        except psutil.Error:
            continue
    pids = {process.pid for process in found}
    return [process for process in found if process.ppid() not in pids]


LIVES = st.lists(
    st.sampled_from(["deliver_a", "deliver_b", "cut", "restore", "kill", "expire"]),
    min_size=4,
    max_size=8,
)


# No shrinking: each example runs etcd, two daemons and real harnesses for seconds.
@settings(
    phases=[Phase.reuse, Phase.generate],
    max_examples=int(os.environ.get("TETHER_LIVES", "5")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(ops=LIVES)
async def test_random_host_lives_never_attach_two_harnesses(
    ops: list[str], etcd_cluster: Cluster
) -> None:
    """Random deliveries through either host, host a cut off from etcd and back, harness
    SIGKILLs, host a's lease running out while it is cut off, host b adopting: after every
    step no two harnesses are attached (by both event logs), each host runs at most one
    harness of the session, delivered epochs never go back, and every delivery ends within
    its bound."""
    session = unique_session()
    prefix = f"/test-{uuid.uuid4().hex}"
    proxy = Proxy(etcd_cluster.endpoints[0])
    env = {**os.environ, "TETHER_RECONNECT_FOR": "30"}
    settings_ = {"heartbeat": 0.2, "grace": 0.3, "start_timeout": 5.0, "env": env}
    bound = 3 * (2 * 0.6 + 2 * 0.3 + 1 + 5.0) + 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o700)
        stores = [
            EtcdEpochStore(
                [proxy.endpoint], prefix=prefix, host_id="a", lease_ttl=TTL, timeout=1.0
            ),
            EtcdEpochStore(etcd_cluster.endpoints, prefix=prefix, host_id="b", lease_ttl=TTL),
        ]
        for name in ("a", "b"):
            (root / name).mkdir(mode=0o700)
        a = Agentd(stores[0], root / "a" / "s.sock", QUICK, **settings_)  # type: ignore[arg-type]
        b = Agentd(stores[1], root / "b" / "s.sock", QUICK, adopt=True, **settings_)  # type: ignore[arg-type]
        latest = 0
        cut = False
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.serve)
                async with a.running(stop_harnesses=True), b.running(stop_harnesses=True):
                    for op in ops:
                        if op in ("deliver_a", "deliver_b"):
                            daemon = a if op == "deliver_a" else b
                            with trio.fail_after(bound):
                                try:
                                    delivered = await daemon.deliver(session, op)
                                except DeliveryFailed:
                                    pass
                                else:
                                    assert delivered.epoch >= latest, f"epoch went back: {ops}"
                                    latest = delivered.epoch
                        elif op == "cut" and not cut:
                            proxy.cut()
                            cut = True
                        elif op == "restore" and cut:
                            await nursery.start(proxy.serve)
                            cut = False
                        elif op == "kill":
                            for host in ("a", "b"):
                                for process in host_harnesses(session, host):
                                    process.kill()
                        elif op == "expire" and cut:
                            # Host a's lease runs out on etcd (the proxy keeps it from being
                            # kept alive): its ownership of the session ends within the TTL.
                            with trio.fail_after(TTL + 5):
                                while await stores[1].owner(session) == "a":
                                    await trio.sleep(0.05)
                        rows = [
                            dict(row.to_json(), host=host)
                            for host in ("a", "b")
                            for row in _events(root / host, session)
                        ]
                        never_two_attached(rows, {})
                        for host in ("a", "b"):
                            assert len(host_harnesses(session, host)) <= 1, f"{host}: {ops}"
                    if cut:
                        await nursery.start(proxy.serve)
                nursery.cancel_scope.cancel()
        finally:
            for store in stores:
                await store.aclose()
            kill_marked(session)
            await wait_until(lambda: marked(session) == [])
            await wait_until(reap_zombie_children)


def test_the_attachment_check_catches_two_harnesses_at_once() -> None:
    def row(at: float, host: str, kind: str, pid: int) -> dict[str, Any]:
        return {"at": at, "host": host, "kind": kind, "pid": pid}

    handover = [row(1, "a", "attached", 10), row(2, "a", "unconfirmed", 10)]
    never_two_attached([*handover, row(3, "b", "attached", 20)], {})
    never_two_attached([row(1, "a", "attached", 10), row(3, "b", "attached", 20)], {"a": 2})
    with pytest.raises(AssertionError, match="b pid 20 attached while"):
        never_two_attached([row(1, "a", "attached", 10), row(3, "b", "attached", 20)], {})
    with pytest.raises(AssertionError, match="a pid 10 attached while"):
        never_two_attached(
            [*handover, row(3, "b", "attached", 20), row(4, "a", "confirmed", 10)], {}
        )
