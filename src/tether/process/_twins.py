"""``find_twins``: live processes marked with a session but not owned by this epoch."""

from __future__ import annotations

import os

import psutil

from ._ref import ProcessRef
from ._table import HOST_VAR, STORE_VAR, marks


class _Own:
    """``find_twins``'s default host: the one in this process's own environment."""

    def __repr__(self) -> str:
        return "<this process's host>"


_OWN = _Own()


def find_twins(
    session: str,
    *,
    exclude_epoch: int | None = None,
    epoch: int | None = None,
    host: str | _Own | None = _OWN,
    store: str | _Own | None = _OWN,
) -> list[ProcessRef]:
    """Processes whose environment marks ``session`` (``TETHER_SESSION``), except this epoch's.

    A harness superseded by a newer epoch, and every child it started, still carry the old
    epoch; a ``ChildGroup`` of the new epoch finds and replaces them. Processes this user may
    not inspect are skipped, and so are zombies (they have no environment left).

    Args:
        session: the session id to look for.
        exclude_epoch: leave out processes marked with this epoch (normally one's own).
        epoch: only processes marked with this epoch (what a dead harness left behind).
        host: only processes of this host id (``TETHER_HOST``; ``None``: unmarked ones);
            by default this process's own.
        store: only processes of this store's daemon (``TETHER_STORE_ID``; ``None``:
            unmarked ones); by default this process's own.
    """
    if isinstance(host, _Own):
        host = os.environ.get(HOST_VAR)
    if isinstance(store, _Own):
        store = os.environ.get(STORE_VAR)
    me = os.getpid()
    found: list[ProcessRef] = []
    for pid in psutil.pids():
        if pid == me:
            continue
        mark = marks(pid)
        if mark is None or mark.session != session or mark.host != host or mark.store != store:
            continue
        if exclude_epoch is not None and mark.epoch == str(exclude_epoch):
            continue
        if epoch is not None and mark.epoch != str(epoch):
            continue
        try:
            found.append(ProcessRef.of(pid))
        except ProcessLookupError:
            continue
    return found
