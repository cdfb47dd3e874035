"""``tether agentd`` (the daemon in the foreground) and the commands that talk to it:
``tether ps``, ``start``, ``send``, ``stop``, ``reset``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import socket
import sys
import time
from typing import Any, TextIO

import trio

from .. import signals
from ..agentd import Agentd, AgentdError, StallPolicy
from ..agentd._client import default_socket, request
from ..agentd._control import ControlOp
from ..epochs import EpochStore, HostIdInUse, SqliteEpochStore, StoreInUse, StoreUnavailable

logger = logging.getLogger("tether.cli")


COMMANDS = ("agentd", *ControlOp)
"""The commands this module registers and runs."""


def add_commands(commands: Any) -> None:
    """Register ``agentd``, ``ps``, ``start``, ``send``, ``stop`` and ``reset``."""
    daemon = commands.add_parser("agentd", help="run the session daemon in the foreground")
    daemon.add_argument("--socket", default=default_socket(), help="its Unix socket")
    daemon.add_argument(
        "--store",
        default=None,
        help="sqlite:PATH, PATH, or etcd://HOST:PORT,HOST:PORT[/PREFIX]"
        " (default: epochs.sqlite3 by the socket)",
    )
    daemon.add_argument(
        "--host-id",
        default=None,
        help="this host's id on an etcd store, one daemon per id (default: hostname)",
    )
    daemon.add_argument(
        "--lease-ttl", type=int, default=10, help="seconds the host lease outlives a keepalive"
    )
    daemon.add_argument(
        "--adopt",
        action="store_true",
        help="take over sessions of hosts whose lease ended (etcd store)",
    )
    daemon.add_argument("--state-dir", default=None, help="sessions' directories and the log")
    daemon.add_argument("--heartbeat", type=float, default=1.0)
    daemon.add_argument("--miss-limit", type=int, default=3)
    daemon.add_argument("--grace", type=float, default=2.0)
    daemon.add_argument("--restart-limit", type=int, default=5)
    daemon.add_argument("--restart-window", type=float, default=60.0)
    daemon.add_argument(
        "--start-timeout",
        type=float,
        default=10.0,
        help="seconds a new harness has to say hello, counted from its turn to start",
    )
    daemon.add_argument(
        "--spawn-limit",
        type=int,
        default=None,
        help="harnesses started at once (default: twice the CPUs)",
    )
    daemon.add_argument(
        "--stall-after",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a turn or tool without progress this long is stalled, where the harness has no"
        " measured threshold (default 300)",
    )
    daemon.add_argument(
        "--on-stall",
        choices=[policy.value for policy in StallPolicy],
        default=StallPolicy.ANNOUNCE.value,
        help="announce a stall, or respawn the session in a fresh epoch (default announce)",
    )
    daemon.add_argument(
        "--stop-harnesses", action="store_true", help="stop every harness when the daemon stops"
    )
    daemon.add_argument("harness", nargs="*", help="after --: how to start a harness")
    ps = commands.add_parser(ControlOp.PS, help="list the daemon's sessions")
    ps.add_argument("--socket", default=default_socket())
    ps.add_argument("--json", action="store_true")
    for op in ControlOp:
        if not op.takes_session:
            continue
        sub = commands.add_parser(op, help=f"{op} a session through the running daemon")
        sub.add_argument("--socket", default=default_socket())
        sub.add_argument("session")
        if op.takes_text:
            sub.add_argument("text")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run one of the commands ``add_commands`` registered; the exit status."""
    if args.command == "agentd":
        args.socket = os.path.abspath(args.socket)
        return trio.run(_daemon, args)
    try:
        result = trio.run(
            request,
            args.socket,
            args.command,
            getattr(args, "session", ""),
            getattr(args, "text", ""),
        )
    except AgentdError as exc:
        print(f"tether {args.command}: {exc.reason}", file=sys.stderr)
        return 1
    if args.command == ControlOp.PS and not args.json:
        out.write(table(result["sessions"]))
    else:
        out.write(json.dumps(result, indent=None if args.command != ControlOp.PS else 2) + "\n")
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    """The ``tether ps`` table."""
    header = (
        "SESSION", "STATE", "EPOCH", "PID", "HEARTBEAT", "ACTIVITY", "SILENCE", "RESTARTS",
        "LAST EVENT",
    )  # fmt: skip
    lines = [header]
    for row in rows:
        age = row["heartbeat_age"]
        restarts = str(row["restarts"])
        if row.get("next_attempt") is not None:
            restarts += f" (next in {row['next_attempt']:.1f}s)"
        lines.append(
            (
                row["session"],
                row["state"],
                "-" if row["epoch"] is None else str(row["epoch"]),
                "-" if row["pid"] is None else str(row["pid"]),
                "-" if age is None else f"{age:.1f}s ago",
                row.get("activity") or "-",
                _silence(row),
                restarts,
                row["last_event"],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False))
        + "  "
        + line[-1]
        + "\n"
        for line in lines
    )


def _silence(row: dict[str, Any]) -> str:
    silence, threshold = row.get("silence"), row.get("threshold")
    if silence is None:
        return "-"
    limit = f"/{threshold:g}s {row.get('threshold_source', '')}".rstrip() if threshold else ""
    return f"{silence:.0f}s{limit}"


def open_store(spec: str, *, host_id: str | None = None, lease_ttl: int = 10) -> EpochStore:
    """The store named on the command line: ``sqlite:PATH``, a plain path, or
    ``etcd://HOST:PORT,HOST:PORT[/PREFIX]`` (needs the ``tether[etcd]`` extra)."""
    if spec.startswith("etcd://"):
        try:
            from ..epochs import EtcdEpochStore
        except ImportError as exc:
            raise SystemExit(
                f"tether agentd: the etcd store needs: pip install 'tether[etcd]' ({exc})"
            ) from None

        hosts, slash, prefix = spec.removeprefix("etcd://").partition("/")
        return EtcdEpochStore(
            [h for h in hosts.split(",") if h],
            prefix="/" + prefix if slash and prefix else "/tether",
            host_id=host_id or socket.gethostname(),
            lease_ttl=lease_ttl,
        )
    path = spec.removeprefix("sqlite:")
    return SqliteEpochStore(path)


async def _daemon(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
        )
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    _raise_fd_limit()
    socket_path = args.socket
    directory = os.path.dirname(socket_path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    harness = args.harness or [sys.executable, "-m", "tether.harness.example"]
    # Signals first: the store's worker thread must start with them blocked.
    async with signals.receive(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as events:
        store = open_store(
            args.store or os.path.join(directory, "epochs.sqlite3"),
            host_id=args.host_id,
            lease_ttl=args.lease_ttl,
        )
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
            )
            unavailable: BaseException | None = None
            displaced: BaseException | None = None
            in_use: BaseException | None = None
            try:
                async with agentd.running(stop_harnesses=args.stop_harnesses):
                    logger.info(
                        "agentd pid %d serving %s; harness: %s",
                        os.getpid(),
                        socket_path,
                        " ".join(harness),
                    )
                    event = await events.recv()
                    started = time.monotonic()
                    logger.info(
                        "stopping (%s)%s",
                        event.describe(),
                        "; stopping every harness"
                        if args.stop_harnesses
                        else "; harnesses keep running",
                    )
            except* HostIdInUse as group:
                displaced = group.exceptions[0]
            except* StoreInUse as group:
                in_use = group.exceptions[0]
            except* StoreUnavailable as group:
                unavailable = group.exceptions[0]
            if displaced is not None:
                logger.error("agentd stands down: %s", displaced)
                return 78
            if in_use is not None:
                logger.error("agentd cannot start: %s", in_use)
                return 75
            if unavailable is not None:
                logger.error("agentd cannot reach its store: %s", unavailable)
                return 69
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
    logger.info("agentd stopped in %.3fs", time.monotonic() - started)
    return 0


FD_LIMIT = 65536
"""The soft limit on open files the daemon raises itself to (if the hard limit allows)."""


def _raise_fd_limit() -> None:
    """Raise the soft limit on open files toward the hard one: each harness and each client
    costs the daemon a descriptor, and systemd's default soft limit (1024) is soon reached.
    Capped at ``FD_LIMIT``, since harnesses inherit it and some programs loop over it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_LIMIT if hard == resource.RLIM_INFINITY else min(hard, FD_LIMIT)
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:
            logger.warning("open files: soft limit %d, hard %d; not raised: %s", soft, hard, exc)
            return
    logger.info("open files: soft limit %d (was %d), hard limit %d", max(soft, wanted), soft, hard)
