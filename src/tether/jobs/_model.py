"""Jobs, steps, turns and the two remote parties: the thread server and the planner.

A job is ``running`` while a controller steps it; every other status is where it stops:
``completed``, ``failed`` and ``cancelled`` are terminal, ``blocked`` waits for a person or the
planner, and each of those four wakes the planner.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

RUNNING = "running"
BLOCKED = "blocked"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
STOPS = TERMINAL | {BLOCKED}
SETTLED_TURN = frozenset({"completed", "error", "interrupted"})


@attrs.define
class Job:
    """One job: what a controller steps, as the store keeps it."""

    id: str
    """The job's id."""
    phase: str
    """The step that runs next."""
    routes: tuple[str, ...] = ("default",)
    """The model routes to try, in order; an interrupted turn moves the job to the next."""
    status: str = RUNNING
    """``running``, or how it stopped: ``completed``, ``failed``, ``cancelled``, ``blocked``."""
    route_index: int = 0
    """Which of ``routes`` is in use."""
    turns: dict[str, str] = attrs.field(factory=dict)
    """Every turn started for the job, by id, with its last known status."""
    reason: str | None = None
    """Why the job stopped, when it did not complete."""
    workspace: str | None = None
    """Held while the job may still run; ``None`` once released."""
    report: list[str] = attrs.field(factory=list)
    """Salvaged output and notes, kept across route moves and to the end."""
    data: dict[str, Any] = attrs.field(factory=dict)
    """The steps' own state (round counts, ids...)."""

    @property
    def route(self) -> str:
        """The route in use: ``routes[route_index]`` (the last one past the end)."""
        return self.routes[min(self.route_index, len(self.routes) - 1)]


@attrs.frozen
class Step:
    """What a step did: any ``action`` name at all, and the explicit next state, if any.

    ``phase`` names the step to run next (the job stays ``running``); ``status`` ends the run
    (``completed``, ``failed``, ``blocked``, ``cancelled``, with ``reason``). A step that gives
    neither leaves the job nowhere: the controller blocks it with
    ``controller_exit_unhandled: <action>`` rather than let it sit ``running``.
    """

    action: str
    """What the step did, recorded in the job's report."""
    phase: str | None = None
    """The next phase, when the job goes on."""
    status: str | None = None
    """The stop status, when the job stops."""
    reason: str | None = None
    """Why it stopped."""


@attrs.frozen
class TurnState:
    """The thread server's view of one turn."""

    turn: str
    """The turn's id."""
    status: str
    """``running``, ``completed``, ``error`` or ``interrupted``."""
    session_stopped: bool = False
    """Whether the session that ran the turn has stopped."""
    active: bool = True
    """Whether the thread still has an active turn."""

    @property
    def settled(self) -> bool:
        """Finished, or a stopped session with no active turn (nothing left to finish)."""
        return self.status in SETTLED_TURN or (self.session_stopped and not self.active)


class BackendUnreachable(Exception):
    """The thread server could not be reached; the message names where and why."""


class TurnBackend(Protocol):
    """The remote thread server, as the controller needs it."""

    async def interrupt(self, turn: str) -> None:
        """Ask for the turn to stop (applied asynchronously). Raises ``BackendUnreachable``."""
        ...

    async def snapshot(self, turn: str) -> TurnState:
        """The turn's current state. Raises ``BackendUnreachable``."""
        ...


class Planner(Protocol):
    """Whoever must hear that a job stopped."""

    async def wake(self, job: str, status: str, reason: str | None) -> None:
        """Tell the planner; raising leaves the wake queued for a retry."""
        ...
