"""``tether agentd``'s command line: its options and their defaults, and nothing that runs
the daemon (``_agentd``), so building the parser for any command imports no trio."""

from __future__ import annotations

import argparse
from typing import Any

from ..agentd._activity import StallPolicy
from ..wire._control import default_socket
from ._errors import Formatter, not_negative, positive
from ._logs import LEVELS


def add_command(commands: Any) -> None:
    """Register ``tether agentd``."""
    daemon = commands.add_parser(
        "agentd",
        help="run the session daemon in the foreground",
        description="Run the session daemon in the foreground: one harness per session,"
        " reattached while healthy, replaced when a phantom, dead or stalled.",
        epilog="examples:\n"
        "  tether agentd -- python engine.py\n"
        "  tether agentd --store etcd://10.0.0.5:2379 --etcd-cacert ca.pem -- python engine.py",
        formatter_class=Formatter,
    )
    daemon.add_argument(
        "--socket",
        default=None,
        help="its Unix socket; the directory holding it must be this user's, mode 0700 (made so"
        f" if missing), or the daemon refuses to start (exit 77) (default: {default_socket()})",
    )
    daemon.add_argument(
        "--store",
        default=None,
        help="sqlite:PATH, PATH, or etcd://HOST:PORT,HOST:PORT[/PREFIX]"
        " (default: epochs.sqlite3 in the state directory)",
    )
    daemon.add_argument(
        "--host-id",
        default=None,
        help="this host's id on an etcd store, one daemon per id (default: the hostname)",
    )
    daemon.add_argument(
        "--lease-ttl", type=positive(int), default=10,
        help="seconds the host lease outlives a keepalive (etcd store)",
    )  # fmt: skip
    daemon.add_argument(
        "--adopt", action="store_true",
        help="take over sessions of hosts whose lease ended (etcd store)",
    )  # fmt: skip
    add_etcd_options(daemon)
    daemon.add_argument(
        "--state-dir", default=None, help="sessions' directories (transcripts), the event log and"
        " the store (default: beside a socket named by --socket or $TETHER_AGENTD, else"
        " $XDG_STATE_HOME/tether or ~/.local/state/tether; `tether paths` shows it)",
    )  # fmt: skip
    daemon.add_argument(
        "--heartbeat", type=positive(float), default=1.0, help="seconds between pings"
    )
    daemon.add_argument(
        "--miss-limit", type=positive(int), default=3,
        help="heartbeats without a pong that make a harness a phantom",
    )  # fmt: skip
    daemon.add_argument(
        "--grace", type=not_negative, default=2.0,
        help="seconds between SIGINT, SIGTERM and SIGKILL when stopping a harness",
    )  # fmt: skip
    daemon.add_argument(
        "--restart-limit", type=positive(int), default=5,
        help="restarts within --restart-window that fail a session",
    )  # fmt: skip
    daemon.add_argument("--restart-window", type=positive(float), default=60.0, help="seconds")
    daemon.add_argument(
        "--backoff", type=not_negative, default=0.5, metavar="SECONDS",
        help="the wait before a crashing session's second restart in a row, doubled for each"
        " after it",
    )  # fmt: skip
    daemon.add_argument(
        "--backoff-cap", type=not_negative, default=30.0, metavar="SECONDS",
        help="the longest wait between restarts",
    )  # fmt: skip
    daemon.add_argument(
        "--start-timeout", type=positive(float), default=10.0,
        help="seconds a new harness has to say hello, counted from its turn to start",
    )  # fmt: skip
    daemon.add_argument(
        "--spawn-limit", type=positive(int), default=None,
        help="harnesses started at once (default: twice the CPUs)",
    )  # fmt: skip
    daemon.add_argument(
        "--stall-after", type=positive(float), default=300.0, metavar="SECONDS",
        help="a turn or tool without progress this long is stalled, where the harness has no"
        " measured threshold",
    )  # fmt: skip
    daemon.add_argument(
        "--on-stall", choices=[policy.value for policy in StallPolicy],
        default=StallPolicy.ANNOUNCE.value,
        help="announce a stall, or respawn the session in a fresh epoch",
    )  # fmt: skip
    daemon.add_argument(
        "--stop-harnesses", action="store_true", help="stop every harness when the daemon stops"
    )
    daemon.add_argument("--log-level", choices=LEVELS, default="info", help="least severe shown")
    daemon.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="json: one object per line with every field",
    )  # fmt: skip
    daemon.add_argument(
        "--log-file", default=None, help="log here, not to stderr (SIGHUP reopens it)"
    )
    daemon.add_argument(
        "--metrics", default=None, metavar="HOST:PORT",
        help="serve Prometheus metrics here (needs tether[metrics])",
    )  # fmt: skip
    daemon.add_argument("harness", nargs="*", help="after --: how to start a harness")


def add_etcd_options(parser: argparse.ArgumentParser) -> None:
    """TLS and authentication for an etcd store; a password never comes from argv."""
    parser.add_argument(
        "--etcd-cacert", default=None, help="verify etcd's certificate with this CA (PEM)"
    )
    parser.add_argument("--etcd-cert", default=None, help="client certificate for etcd (PEM)")
    parser.add_argument("--etcd-key", default=None, help="its private key (PEM)")
    parser.add_argument(
        "--etcd-user", default=None,
        help="etcd user; the password comes from --etcd-password-file or $TETHER_ETCD_PASSWORD",
    )  # fmt: skip
    parser.add_argument(
        "--etcd-password-file", default=None, help="a file holding the etcd user's password"
    )
