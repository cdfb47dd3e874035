"""The control protocol's vocabulary, shared by the daemon and every client: what a
``Control`` asks (``ControlOp``), where a client looks for the daemon (``default_socket``), and
what a client says when it cannot reach it (the async and the blocking client say the same).
Nothing here imports trio, so a one-shot command (``tether ps``) does not pay for it."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping

BUSY_FOR = 5.0
"""Seconds a client waits for room in a daemon's full listen queue."""
NO_ANSWER = "agentd closed the connection without an answer"


def unreachable(socket_path: str, exc: OSError) -> str:
    """Why a client could not connect: nobody listens at ``socket_path``."""
    return f"no agentd at {socket_path}: {exc.strerror or exc}"


RETRY_EVERY = 1.0
"""A harness that lost its daemon tries to connect again at least this often (backing off from
50 ms to this): a restarted daemon that adopts it gives it two tries to come back."""

STARTING_FOR = 10.0
"""Seconds a client waits for a daemon that runs but does not listen yet: ``tether agentd ...
&`` and at once ``tether start`` (it is still importing). With no daemon, it waits for none."""


def starting(socket_path: str) -> bool:
    """Whether a ``tether agentd`` of this user that serves ``socket_path`` runs: found by its
    command line (before any ``--``), its ``--socket`` or else its ``$TETHER_AGENTD`` or the
    default. A client that cannot connect waits for such a daemon, and only for one."""
    target = os.path.abspath(socket_path)
    me, uid = os.getpid(), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        argv = argv[: argv.index("--")] if "--" in argv else argv
        if "agentd" in argv and _served(int(name), argv) == target:
            return True
    return False


def _served(pid: int, argv: list[str]) -> str | None:
    """The absolute path of the socket the daemon ``pid`` with ``argv`` serves (a relative
    one is its own working directory's); ``None`` if it cannot be read."""
    given: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--socket" and i + 1 < len(argv):
            given = argv[i + 1]
        elif arg.startswith("--socket="):
            given = arg.partition("=")[2]
    try:
        env: dict[str, str] = {}
        if given is None:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for entry in f.read().split(b"\0"):
                    name, _, value = entry.partition(b"=")
                    if name in (b"TETHER_AGENTD", b"XDG_RUNTIME_DIR") and value:
                        env[name.decode()] = value.decode(errors="replace")
            given = env.get("TETHER_AGENTD")
        path = given or _fallback_socket(env)
        return os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), path))
    except OSError:
        return None


def busy(socket_path: str, waited: float) -> str:
    """Why a client gave up connecting: the listen queue stayed full for ``waited`` seconds."""
    return f"agentd at {socket_path} is busy: its listen queue stayed full for {waited:g}s"


def default_socket() -> str:
    """``$TETHER_AGENTD``, else ``$XDG_RUNTIME_DIR/tether/agentd.sock``, else
    ``/tmp/tether-<uid>/agentd.sock``."""
    return os.environ.get("TETHER_AGENTD") or _fallback_socket(os.environ)


def _fallback_socket(env: Mapping[str, str]) -> str:
    """The socket when none is named: in the user's runtime directory (``$XDG_RUNTIME_DIR``,
    private and cleared at logout), else in ``/tmp``."""
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "tether", "agentd.sock")
    return f"/tmp/tether-{os.getuid()}/agentd.sock"


class ControlOp(enum.StrEnum):
    """What a ``Control`` request asks the daemon to do."""

    PS = "ps"
    START = "start"
    SEND = "send"
    STOP = "stop"
    RESET = "reset"
    EVENTS = "events"
    LOGS = "logs"
    INSPECT = "inspect"

    @property
    def takes_session(self) -> bool:
        return self not in (ControlOp.PS, ControlOp.EVENTS)

    @property
    def takes_text(self) -> bool:
        return self is ControlOp.SEND

    @property
    def needs_session(self) -> bool:
        """It acts on an existing session (unless the request says ``create``)."""
        return self in (
            ControlOp.SEND, ControlOp.STOP, ControlOp.RESET, ControlOp.LOGS, ControlOp.INSPECT
        )  # fmt: skip

    @property
    def can_create(self) -> bool:
        """Its command takes ``--create`` (act on a session the daemon does not know)."""
        return self in (ControlOp.SEND, ControlOp.STOP, ControlOp.RESET)

    @property
    def streams(self) -> bool:
        """It answers with a stream of replies (``events``, ``logs``)."""
        return self in (ControlOp.EVENTS, ControlOp.LOGS)
