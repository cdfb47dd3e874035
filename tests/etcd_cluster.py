"""A real etcd cluster of loopback members in a temporary directory, for the etcd tests.

Members are this process's children, started with short raft timings so elections take
milliseconds, and stopped by pid. ``require()`` skips the calling test with a visible reason
when no ``etcd`` binary exists, unless ``TETHER_REQUIRE_ETCD`` is set (CI sets it), in which
case it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def require() -> str:
    """The etcd binary, or skip (fail under ``TETHER_REQUIRE_ETCD``) naming what is missing."""
    found = shutil.which("etcd") or next(
        (p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if os.path.exists(p)), None
    )
    if found is None:
        reason = "etcd is not installed (Debian: apt-get install etcd-server)"
        if os.environ.get("TETHER_REQUIRE_ETCD"):
            pytest.fail(f"{reason}, and TETHER_REQUIRE_ETCD says the etcd tests must run")
        pytest.skip(reason)
    return found


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    """``size`` etcd members on loopback, their data and logs under ``directory``."""

    def __init__(
        self, binary: str, directory: Path, size: int = 3, tls: Certificates | None = None
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        ports = free_ports(2 * size)
        self.names = [f"m{i}" for i in range(size)]
        self.client = {name: ports[2 * i] for i, name in enumerate(self.names)}
        self.peer = {name: ports[2 * i + 1] for i, name in enumerate(self.names)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.token = f"tether-{os.getpid()}-{ports[0]}"

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{self.client[name]}" for name in self.names]

    def start(self, name: str) -> None:
        initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            self.procs[name] = subprocess.Popen(
                [
                    self.binary,
                    "--name", name,
                    "--data-dir", str(self.directory / name),
                    "--listen-client-urls", f"{self.scheme}://127.0.0.1:{self.client[name]}",
                    "--advertise-client-urls", f"{self.scheme}://127.0.0.1:{self.client[name]}",
                    *(self.tls.server_flags() if self.tls is not None else []),
                    "--listen-peer-urls", f"http://127.0.0.1:{self.peer[name]}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[name]}",
                    "--initial-cluster", initial,
                    "--initial-cluster-token", self.token,
                    "--initial-cluster-state", "new",
                    "--heartbeat-interval", "50",
                    "--election-timeout", "500",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)
        self.wait_healthy(self.names)

    def healthy(self, name: str) -> bool:
        context = self.tls.client_context() if self.tls is not None else None
        try:
            with urllib.request.urlopen(
                f"{self.scheme}://127.0.0.1:{self.client[name]}/health", timeout=1,
                context=context,
            ) as answer:  # fmt: skip
                return bool(json.load(answer).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def wait_healthy(self, names: list[str], deadline: float = 30.0) -> None:
        """Poll each member's /health (it needs a leader) until all say so, or fail."""
        end = time.monotonic() + deadline
        while not all(self.healthy(name) for name in names):
            for name in names:
                proc = self.procs[name]
                if proc.poll() is not None:
                    log = (self.directory / f"{name}.log").read_text()[-2000:]
                    raise RuntimeError(f"etcd member {name} exited {proc.returncode}:\n{log}")
            if time.monotonic() > end:
                raise TimeoutError(f"etcd members {names} not healthy within {deadline}s")
            time.sleep(0.05)

    def revive(self, *names: str) -> None:
        """Start killed members again on their data and wait until every member is healthy."""
        for name in names:
            self.start(name)
        self.wait_healthy(self.names)

    def kill(self, name: str) -> None:
        """SIGKILL one member and reap it."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        """Stop every member by pid and reap it. SIGKILL: the data is thrown away with the
        directory, and SIGTERM costs each member seconds handing over leadership."""
        for proc in self.procs.values():
            proc.kill()
        for proc in self.procs.values():
            proc.wait(10)
        self.procs.clear()


class Certificates:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl
    in ``directory`` for one test (two days valid)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = directory / "ca.pem", directory / "ca.key"
        self._openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.ca_key,
            "-out", self.ca, "-days", "2", "-subj", "/CN=tether test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        # etcd's JSON gateway dials its own gRPC port with the server's certificate.
        self.server, self.server_key = self._issue("server", "127.0.0.1", "serverAuth,clientAuth")
        # No CommonName: with auth on, etcd's JSON gateway refuses a client certificate that
        # has one ("CommonName of client sending a request against gateway will be ignored").
        self.client, self.client_key = self._issue("client", "", "clientAuth")

    def _issue(self, name: str, cn: str, usage: str) -> tuple[Path, Path]:
        key, csr = self.directory / f"{name}.key", self.directory / f"{name}.csr"
        cert, extensions = self.directory / f"{name}.pem", self.directory / f"{name}.ext"
        # Python 3.13's default context verifies strictly (VERIFY_X509_STRICT): the CA needs
        # its key usage, a leaf its key identifiers, as a real CA would issue them.
        extensions.write_text(
            f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        self._openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
            "-subj", f"/CN={cn}" if cn else "/O=tether test client",
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
            "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", extensions,
        )  # fmt: skip
        return cert, key

    def _openssl(self, *args: object) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)

    def server_flags(self) -> list[str]:
        return [
            "--cert-file", str(self.server), "--key-file", str(self.server_key),
            "--trusted-ca-file", str(self.ca), "--client-cert-auth",
        ]  # fmt: skip

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client), str(self.client_key))
        return context
