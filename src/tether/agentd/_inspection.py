"""``inspect``: a live snapshot of a session's harness (``tether inspect``), asked over its
link and answered by its connection loop, which answers even while its engine is stuck.

The wait is bounded: a harness whose loop does not answer within ``INSPECT_TIMEOUT`` (a task
that never awaits holds the trio thread) is named as such, and nothing else happens to it:
asking never counts against a harness.
"""

from __future__ import annotations

from typing import Any

import trio

from ._link import INSPECT_REVISION
from ._model import Session
from ._outcomes import AgentdError

INSPECT_TIMEOUT = 5.0
"""Seconds the daemon waits for a harness's snapshot (the harness takes well under one)."""
EX_UNAVAILABLE, EX_TEMPFAIL = 69, 75


class Uninspectable(AgentdError):
    """The session has no attached harness that can answer: none is attached, it predates
    ``tether inspect``, or its link closed before it answered."""

    def __init__(self, session: str, reason: str) -> None:
        super().__init__(session, reason, EX_UNAVAILABLE)


class InspectTimedOut(AgentdError):
    """The harness's connection loop did not answer within ``INSPECT_TIMEOUT`` seconds."""

    def __init__(self, session: str, reason: str) -> None:
        super().__init__(session, reason, EX_TEMPFAIL)


async def inspect(session: Session, timeout: float = INSPECT_TIMEOUT) -> dict[str, Any]:  # noqa: ASYNC109
    """``{"session", "pid", "epoch", "state", "snapshot"}`` of ``session``'s harness now.

    Raises:
        Uninspectable: no harness is attached, it predates inspection, its link closed first,
            or it could not make a snapshot.
        InspectTimedOut: its loop did not answer within ``timeout`` seconds.
    """
    harness = session.harness
    link = harness.link if harness is not None and harness.usable else None
    if link is None or link.closed:
        raise Uninspectable(session.name, f"no harness is attached (it is {session.state})")
    pid = link.ref.pid
    if link.revision < INSPECT_REVISION:
        raise Uninspectable(
            session.name,
            f"its harness (pid {pid}) speaks wire revision {link.revision}, which predates"
            f" inspection ({INSPECT_REVISION}): it answers once restarted with this tether",
        )
    with trio.move_on_after(timeout):
        snapshot = await link.inspect()
        if snapshot is None:
            reason = f"its harness (pid {pid}) went away before it answered"
            raise Uninspectable(session.name, reason)
        if "error" in snapshot:
            reason = f"its harness (pid {pid}) could not answer: {snapshot['error']}"
            raise Uninspectable(session.name, reason)
        return {"session": session.name, "pid": pid, "epoch": link.epoch,
                "state": str(session.state), "snapshot": snapshot}  # fmt: skip
    raise InspectTimedOut(
        session.name,
        f"its harness (pid {pid}) did not answer within {timeout:g}s: its trio thread is"
        " held (a task that never awaits, or a blocking call)",
    )
