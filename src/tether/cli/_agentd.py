"""``tether agentd``: the daemon in the foreground. Its errors become one line and a sysexits
code (``_errors``): the store in use 75, unreachable 69, a host id taken 78, a socket
directory others can reach 77, a setting it refuses 78."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import resource
import signal
import socket
import sys
import time

import trio

from .. import signals
from .._private import make_owned
from ..agentd import Agentd, Backoff
from ..epochs import EpochStore, SqliteEpochStore
from ..process import SpawnError
from ..process._spawn import resolve
from ._errors import (
    EX_NOINPUT,
    EX_NOPERM,
    EX_UNAVAILABLE,
    EX_USAGE,
    CliError,
)
from ._logs import configure, reopen
from ._metrics import metrics_server
from ._paths import resolve as resolve_paths

logger = logging.getLogger("tether.cli")


def open_store(args: argparse.Namespace, default: str) -> EpochStore:
    """The store named on the command line: ``sqlite:PATH``, a plain path, or
    ``etcd://HOST:PORT,HOST:PORT[/PREFIX]`` (needs the ``tether[etcd]`` extra).

    Raises:
        CliError: the etcd extra is missing (69), or a TLS or password file is unreadable (66).
    """
    spec = args.store or default
    if not spec.startswith("etcd://"):
        return SqliteEpochStore(spec.removeprefix("sqlite:"))
    try:
        from ..epochs import EtcdEpochStore
    except ImportError as exc:
        raise CliError(
            EX_UNAVAILABLE, f"the etcd store needs: pip install 'tether[etcd]' ({exc})"
        ) from None
    hosts, slash, prefix = spec.removeprefix("etcd://").partition("/")
    for path in (args.etcd_cacert, args.etcd_cert, args.etcd_key):
        if path is not None and not os.access(path, os.R_OK):
            raise CliError(EX_NOINPUT, f"cannot read {path}")
    if (args.etcd_cert is None) != (args.etcd_key is None):
        raise CliError(EX_USAGE, "--etcd-cert and --etcd-key go together")
    return EtcdEpochStore(
        [h for h in hosts.split(",") if h],
        prefix="/" + prefix if slash and prefix else "/tether",
        host_id=args.host_id or socket.gethostname(),
        lease_ttl=args.lease_ttl,
        cacert=args.etcd_cacert,
        cert=(args.etcd_cert, args.etcd_key) if args.etcd_cert else None,
        user=args.etcd_user,
        password=_password(args) if args.etcd_user else None,
    )


def _password(args: argparse.Namespace) -> str:
    if args.etcd_password_file is not None:
        try:
            with open(args.etcd_password_file, encoding="utf-8") as secret:
                return secret.read().rstrip("\n")
        except OSError as exc:
            raise CliError(EX_NOINPUT, f"cannot read the etcd password: {exc}") from None
    password = os.environ.get("TETHER_ETCD_PASSWORD")
    if password is None:
        raise CliError(EX_USAGE, "--etcd-user needs --etcd-password-file or $TETHER_ETCD_PASSWORD")
    return password


def run(args: argparse.Namespace) -> int:
    """``tether agentd``; the exit status (errors are raised for ``_errors.report``)."""
    paths = resolve_paths(args.socket, args.state_dir, args.store)
    args.socket, args.state_dir, args.store = paths.socket, paths.state_dir, paths.store
    check_harness(args.harness)
    configure(args.log_level, args.log_format, args.log_file)
    return trio.run(_daemon, args)


def check_harness(argv: list[str] | None) -> None:
    """Refuse, before the daemon starts, a harness program that cannot run: one not found or
    not executable, or a ``python SCRIPT`` whose script does not exist (found otherwise only
    at the first ``start``, as a harness that died before its hello).

    Raises:
        CliError: 66 for what does not exist, 77 for what may not be executed.
    """
    if not argv:
        return
    try:
        resolve(argv[0], os.environ, None)
    except SpawnError as exc:
        code = EX_NOPERM if exc.errno == errno.EACCES else EX_NOINPUT
        raise CliError(code, f"the harness: {exc.strerror}") from None
    script = argv[1] if len(argv) > 1 else ""
    python = os.path.basename(argv[0]).startswith("python")
    if python and script.endswith(".py") and not os.path.isfile(script):
        raise CliError(EX_NOINPUT, f"the harness: {script} does not exist")


async def _daemon(args: argparse.Namespace) -> int:
    limit = _raise_fd_limit()
    socket_path = args.socket
    directory = os.path.dirname(socket_path)
    # Checked before anything is opened or created in it (ADR 0044): a directory another
    # user made first could hold a link that turns the store's first write into theirs.
    make_owned(directory, "socket directory", private=True)
    make_owned(args.state_dir, "state directory")  # the store may be in it: checked first too
    harness = args.harness or [sys.executable, "-m", "tether.harness.example"]
    # Signals first: the store's worker thread must start with them blocked.
    async with signals.receive(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as events:
        store = open_store(args, args.store)
        try:
            agentd = Agentd(
                store,
                socket_path,
                harness,
                heartbeat=args.heartbeat,
                miss_limit=args.miss_limit,
                restart_limit=(args.restart_limit, args.restart_window),
                grace=args.grace,
                start_timeout=args.start_timeout,
                state_dir=args.state_dir,
                reap_orphans=True,
                adopt=args.adopt,
                spawn_limit=args.spawn_limit,
                stall_after=args.stall_after,
                on_stall=args.on_stall,
                restart_backoff=Backoff(first=args.backoff, cap=args.backoff_cap),
            )
            serve = metrics_server(agentd, args.metrics) if args.metrics else None
            running = agentd.running(stop_harnesses=args.stop_harnesses)
            async with running, trio.open_nursery() as extras:
                if serve is not None:
                    extras.start_soon(serve, name="agentd metrics")
                logger.info(
                    "agentd pid %d serving %s; harness: %s",
                    os.getpid(),
                    socket_path,
                    " ".join(harness),
                )
                if limit:  # said once it serves: an error before it comes first, alone
                    logger.info("%s", limit)
                while True:
                    event = await events.recv()
                    if event.signo != signal.SIGHUP:
                        break
                    logger.info("%s: reopening the log files", event.describe())
                    reopen()
                    agentd.events.reopen()
                started = time.monotonic()
                extras.cancel_scope.cancel()
                keep = "stopping every harness" if args.stop_harnesses else "harnesses keep running"
                logger.info("stopping (%s); %s", event.describe(), keep)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
    logger.info("agentd stopped in %.3fs", time.monotonic() - started)
    return 0


FD_LIMIT = 65536
"""The soft limit on open files the daemon raises itself to (if the hard limit allows)."""


def _raise_fd_limit() -> str:
    """Raise the soft limit on open files toward the hard one: each harness and each client
    costs the daemon a descriptor, and systemd's default soft limit (1024) is soon reached.
    Capped at ``FD_LIMIT``, since harnesses inherit it and some programs loop over it. The
    line to log once the daemon serves (``""`` if a warning was logged already)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_LIMIT if hard == resource.RLIM_INFINITY else min(hard, FD_LIMIT)
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:
            logger.warning("open files: soft limit %d, hard %d; not raised: %s", soft, hard, exc)
            return ""
    return f"open files: soft limit {max(soft, wanted)} (was {soft}), hard limit {hard}"
