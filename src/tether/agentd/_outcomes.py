"""What agentd's calls return or raise: every outcome is a value or a typed error with a reason."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ..epochs import OwnedElsewhere, StoreUnavailable
from ..process import SpawnError

How = Literal["spawned", "reattached", "respawned"]


@attrs.frozen
class Attached:
    """``start_agent``'s answer: the session's harness is this pid, at this epoch, and ``how``
    it came to be attached."""

    session: str
    """The session now served."""
    pid: int
    """The pid of the harness that serves it."""
    epoch: int
    """The epoch that harness holds."""
    how: How
    """Whether the harness was reattached, spawned, or replaced a phantom."""


@attrs.frozen
class Delivered:
    """``deliver``'s answer: the harness ``pid`` (or an earlier one of the session) recorded
    prompt ``prompt_id`` in the transcript as its engine took it."""

    session: str
    """The session the prompt went to."""
    prompt_id: str
    """The prompt's id, the same on every attempt and in the transcript."""
    pid: int
    """The pid of the harness whose engine recorded it."""
    epoch: int
    """That harness's epoch."""
    attempts: int
    """How many harnesses were offered the prompt before one recorded it."""
    recorded: bool = True
    """``False``: a harness older than wire revision 4, which says only that its connection
    loop read the prompt (the delivery of before ADR 0034)."""


@attrs.frozen
class Queued:
    """``tether send --no-wait``'s answer: prompt ``prompt_id`` is queued durably; the daemon
    delivers it (its events say how that went)."""

    session: str
    """The session the prompt waits for."""
    prompt_id: str
    """The queued prompt's id."""


@attrs.frozen
class SessionStatus:
    """One row of ``tether ps``."""

    session: str
    """The session's name."""
    state: str
    """A ``SessionState`` value: ``attached``, ``stalled``, ``dead``, ``failed``, ..."""
    epoch: int | None
    """The current epoch (``None``: never started)."""
    pid: int | None
    """The live harness's pid (``None``: none)."""
    heartbeat_age: float | None
    """Seconds since the harness last answered a ping (``None``: never attached)."""
    restarts: int
    """How many times the daemon restarted the session's harness."""
    last_event: str
    """The session's last event, as ``tether ps`` shows it."""
    activity: str = ""
    """What its engine is doing: ``idle``, ``turn``, ``turn on ROUTE``, ``tool NAME`` (empty:
    not known; a harness of an earlier version does not say)."""
    silence: float | None = None
    """Awake seconds since that turn or tool last advanced."""
    threshold: float | None = None
    """The silence it may show before it is ``stalled``."""
    threshold_source: str = ""
    """Where the threshold came from: ``default`` (``stall_after``), ``max_gap``,
    ``quantile`` or ``given``."""
    next_attempt: float | None = None
    """Seconds until its next restart is allowed (its backoff), if one is due."""
    waits: str = ""
    """For a ``stalled`` session: where its engine waits, in one line (``tether inspect``
    shows the whole; empty: not known, or a harness that predates it)."""
    last_turn: str = ""
    """How its last turn ended: ``ok``, or the failure and its status (``http:429``,
    ``unreachable``, ``cut``), shown until a turn succeeds (empty: none reported)."""
    turn_detail: str = ""
    """That failure in a sentence (empty: none)."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _STATUS_FIELDS}


_STATUS_FIELDS = tuple(field.name for field in attrs.fields(SessionStatus))


class AgentdError(Exception):
    """Base of agentd's errors; each names the session and why. ``code`` is the sysexits code
    a command-line client exits with (1 if none is more precise)."""

    def __init__(self, session: str, reason: str, code: int = 1) -> None:
        super().__init__(f"session {session!r}: {reason}")
        self.session = session
        """The session the request was about."""
        self.reason = reason
        """Why the daemon refused or failed it, in a sentence."""
        self.code = code
        """The sysexits code the CLI exits with for it (69 unavailable, 75 try again, ...)."""


class StartFailed(AgentdError):
    """A harness was started but never said ``Hello`` (it exited, or the start timeout passed);
    it was stopped and counted as a restart. ``exited``: it exited on its own (a harness that
    cannot start: the command line exits 78, not 75 "try again")."""

    def __init__(self, session: str, reason: str, *, exited: bool = False) -> None:
        super().__init__(session, reason)
        self.exited = exited
        """Whether the harness exited before its hello (else the start timeout passed)."""


class SessionFailed(AgentdError):
    """The session hit its restart limit; it stays failed until ``Agentd.reset``."""


class DeliveryFailed(AgentdError):
    """Every delivery attempt failed; ``attempts`` says how each one did."""

    def __init__(self, session: str, prompt_id: str, attempts: list[str]) -> None:
        super().__init__(
            session,
            f"prompt {prompt_id} not delivered after {len(attempts)} attempts: "
            + "; ".join(attempts),
        )
        self.prompt_id = prompt_id
        """The prompt's id, as in the outbox and the event log."""
        self.attempts = attempts
        """How each attempt failed, one line each."""


class PromptTooLarge(AgentdError, ValueError):
    """A prompt whose frame would exceed the wire's limit: refused before it is queued, so it
    is never stored and never retried."""

    def __init__(self, session: str, prompt_id: str, size: int, limit: int) -> None:
        super().__init__(
            session,
            f"prompt {prompt_id} is {size} bytes on the wire; the limit is {limit} bytes",
        )
        self.prompt_id = prompt_id
        """The refused prompt's id."""
        self.size = size
        """Its encoded size in bytes."""
        self.limit = limit
        """The largest frame the wire carries, in bytes."""


class Unconfirmed(AgentdError):
    """This daemon cannot confirm it still owns the session: its host lease on a shared store
    is lost (or the store is unreachable), so it takes no work for it until it can."""


REFUSED = (SessionFailed, StartFailed, Unconfirmed, OwnedElsewhere, StoreUnavailable, SpawnError)
"""Why ``start_agent`` can refuse: each names the session and the reason."""
ANSWERED = (AgentdError, OwnedElsewhere, StoreUnavailable, SpawnError, ValueError)
"""What a control request can fail with, answered to its client as an ``Error``."""
