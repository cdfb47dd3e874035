"""Where ``tether agentd`` keeps what it must keep, and ``tether paths``, which says it.

A socket named on the command line or by ``$TETHER_AGENTD`` keeps its state beside it, as
before. With nothing named, the socket goes to the user's runtime directory
(``$XDG_RUNTIME_DIR/tether``, else ``/tmp/tether-<uid>``) and the durable state (the store,
the event log, every session's transcript) to ``$XDG_STATE_HOME/tether``, else
``~/.local/state/tether``: a reboot or a ``/tmp`` clean-up must not take transcripts with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TextIO

import attrs

from ..agentd._settings import EVENT_LOG, session_dir
from ..wire._control import default_socket

STORE = "epochs.sqlite3"


@attrs.frozen
class Paths:
    """The daemon's socket, its state directory and its store (a path or a store URL)."""

    socket: str
    state_dir: str
    store: str

    def to_json(self) -> dict[str, str]:
        """Each place by name, with where the event log and a session's transcript go."""
        return {
            "socket": self.socket,
            "state_dir": self.state_dir,
            "store": self.store,
            "events": os.path.join(self.state_dir, EVENT_LOG),
            "transcript": os.path.join(session_dir(self.state_dir, "SESSION"), "SESSION.jsonl"),
        }


def state_home(env: Mapping[str, str]) -> str | None:
    """``$XDG_STATE_HOME/tether``, else ``~/.local/state/tether``; ``None`` without a home."""
    base = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(base):
        return os.path.join(base, "tether")
    home = env.get("HOME", "")
    return os.path.join(home, ".local", "state", "tether") if os.path.isabs(home) else None


def resolve(
    socket: str | None,
    state_dir: str | None,
    store: str | None,
    env: Mapping[str, str] = os.environ,
) -> Paths:
    """Where a daemon started with these options (``None``: not given) in ``env`` keeps its
    socket, state and store."""
    named = socket is not None or bool(env.get("TETHER_AGENTD"))
    path = os.path.abspath(socket if socket is not None else default_socket())
    if state_dir is None:
        home = None if named else state_home(env)
        state_dir = home if home is not None else os.path.dirname(path)
    state_dir = os.path.abspath(state_dir)
    return Paths(path, state_dir, store or os.path.join(state_dir, STORE))


def show(paths: Paths, out: TextIO, *, as_json: bool) -> int:
    """``tether paths``: one line per place (or one JSON object); exit 0."""
    places = paths.to_json()
    if as_json:
        print(json.dumps(places), file=out)
        return 0
    width = max(map(len, places))
    for name, where in places.items():
        print(f"{name:<{width}}  {where}", file=out)
    return 0
