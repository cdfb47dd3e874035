"""etcd as production runs it (issue 20): TLS with a CA and client certificates, and
authentication by user and password, against a real etcd that the test starts so."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcd_cluster import Certificates, Cluster, require
from helpers import kill_marked, marked, reap_zombie_children, wait_until
from tether import EtcdEpochStore, SessionRecord, StoreUnavailable

PASSWORD = "s3cret-pw"


def gateway(
    cluster: Cluster, path: str, body: dict[str, object], token: str = ""
) -> dict[str, object]:
    """A call to etcd's JSON gateway over TLS with the client certificate."""
    assert cluster.tls is not None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    request = urllib.request.Request(
        f"https://{cluster.endpoints[0]}{path}", data=json.dumps(body).encode(), headers=headers
    )
    context = cluster.tls.client_context()
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        result: dict[str, object] = json.load(answer)
        return result


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Cluster]:
    """One etcd member: TLS only, client certificates required, and auth on with root."""
    certificates = Certificates(tmp_path / "tls")
    cluster = Cluster(require(), tmp_path / "etcd", size=1, tls=certificates)
    cluster.directory.mkdir()
    try:
        cluster.start_all()
        gateway(cluster, "/v3/auth/user/add", {"name": "root", "password": PASSWORD})
        gateway(cluster, "/v3/auth/role/add", {"name": "root"})
        gateway(cluster, "/v3/auth/user/grant", {"user": "root", "role": "root"})
        gateway(cluster, "/v3/auth/enable", {})
        yield cluster
    finally:
        cluster.stop()


def store(cluster: Cluster, **options: object) -> EtcdEpochStore:
    assert cluster.tls is not None
    settings: dict[str, object] = {
        "host_id": "h1",
        "timeout": 3.0,
        "cacert": str(cluster.tls.ca),
        "cert": (str(cluster.tls.client), str(cluster.tls.client_key)),
        "user": "root",
        "password": PASSWORD,
        **options,
    }
    return EtcdEpochStore(cluster.endpoints, **settings)  # type: ignore[arg-type]


async def test_tls_and_auth_carry_every_operation(secured: Cluster) -> None:
    async with store(secured) as etcd:
        assert etcd.endpoints[0].startswith("https://")
        assert await etcd.bump("s1") == 1
        await etcd.save("s1", SessionRecord(state="running", restarts=2), epoch=1)
        record = await etcd.record("s1")
        assert record is not None
        assert record.restarts == 2
        etcd.client._token = "expired"  # as after --auth-token-ttl: asked again, once
        assert await etcd.bump("s1") == 2


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"password": "wrong"}, "authentication failed"),
        ({"user": None, "password": None}, "user name is empty"),
        ({"cacert": None, "cert": None}, ""),  # plain http to a TLS port, or no trust
    ],
    ids=["wrong-password", "no-user", "no-tls"],
)
async def test_what_etcd_refuses_is_store_unavailable(
    secured: Cluster, change: dict[str, object], says: str
) -> None:
    async with store(secured, **change) as etcd:
        with pytest.raises(StoreUnavailable) as refused:
            await etcd.bump("s1")
    assert says in str(refused.value)


async def test_tether_agentd_serves_a_secured_store(secured: Cluster, tmp_path: Path) -> None:
    assert secured.tls is not None
    directory = tmp_path / "daemon"
    directory.mkdir(mode=0o700)
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    tls = secured.tls
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "agentd", "--socket", str(directory / "agentd.sock"),
         "--store", f"etcd://{secured.endpoints[0]}/secured", "--host-id", "h1",
         "--etcd-cacert", str(tls.ca), "--etcd-cert", str(tls.client),
         "--etcd-key", str(tls.client_key), "--etcd-user", "root",
         "--etcd-password-file", str(secret), "--stop-harnesses", "--heartbeat", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        await wait_until(lambda: (directory / "agentd.sock").exists(), timeout=30)
        started = subprocess.run(
            [sys.executable, "-m", "tether", "start", "s1", "--socket",
             str(directory / "agentd.sock")],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["how"] == "spawned"
        cmdline = Path(f"/proc/{daemon.pid}/cmdline").read_bytes()
        assert PASSWORD.encode() not in cmdline  # it came from the file
        raw = gateway(secured, "/v3/auth/authenticate", {"name": "root", "password": PASSWORD})
        key = base64.b64encode(b"/secured/epoch/s1").decode()
        held = gateway(secured, "/v3/kv/range", {"key": key}, token=str(raw["token"]))
        assert held.get("kvs")  # the daemon's bump went through TLS and auth
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
        kill_marked("s1")
        await wait_until(lambda: not marked("s1") and reap_zombie_children())
