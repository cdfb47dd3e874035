"""The messages between agentd and a harness: frozen attrs classes, tagged by snake_case name."""

from __future__ import annotations

import re
from typing import Any

import attrs


@attrs.frozen
class Hello:
    """Harness to daemon, first on every connection: who I am and which epoch I hold."""

    session: str
    """The session the harness serves."""
    epoch: int
    """The epoch it holds."""
    pid: int
    """Its pid."""
    create_time: float
    """Its start time; with ``pid``, names the process for good."""
    revision: int = 1
    """The harness's wire revision (an older harness omits it): 4 reports ``Recorded``; 5
    answers ``Inspect``; 6 reports each turn's end (``TurnEnded``)."""


@attrs.frozen
class Welcome:
    """Daemon to harness: the epoch is current; the daemon's heartbeat is ``heartbeat``."""

    session: str
    """The session."""
    epoch: int
    """The epoch, current."""
    heartbeat: float
    """Seconds between pings; the harness beats at that pace."""
    revision: int = 1
    """The daemon's wire revision (an older daemon omits it): 2 reads activity on pongs; 3
    wants a ``Pong`` with ``seq`` 0 every ``heartbeat`` seconds unasked (a beat), and stops
    pinging a harness once it beats; 4 counts a prompt delivered once it is ``Recorded``; 5
    may ask for an ``Inspection``; 6 reads ``TurnEnded``."""


@attrs.frozen
class Superseded:
    """Daemon to harness: ``epoch`` is not current (``current`` is); the harness must exit.
    The message, not the exception: the store raises ``tether.Superseded``
    (``tether.epochs.Superseded``) where an epoch is fenced."""

    session: str
    """The session."""
    epoch: int
    """The epoch the harness holds."""
    current: int
    """The epoch that is current."""
    reason: str = ""
    """Why the daemon moved on, if not a plain newer epoch (``stalled: ...``): the harness
    seals its open calls with it."""


@attrs.frozen
class Prompt:
    """Daemon to harness: work for the engine."""

    id: str
    """The prompt's id, kept across redeliveries."""
    text: str
    """The prompt."""
    meta: dict[str, Any] = attrs.field(factory=dict)
    """The sender's metadata."""


@attrs.frozen
class Nudge:
    """Daemon to harness after a reattach: look at your queue again."""


@attrs.frozen
class Ping:
    """Daemon to harness: answer with the same ``seq`` from the connection loop itself."""

    seq: int
    """The number a pong repeats."""


@attrs.frozen
class Pong:
    """Harness to daemon: the answer to ``Ping(seq)``, with what the engine is doing (from
    revision 2; an older harness sends ``seq`` only, and an older daemon ignores the rest)."""

    seq: int
    """The ping's number (0: a beat nobody asked for)."""
    kind: str = ""
    """``idle``, ``turn`` or ``tool`` (empty: not reported)."""
    name: str = ""
    """The tool's name, or the turn's route (empty if it has none)."""
    age: float = 0.0
    """Awake seconds since the turn or the tool started."""
    silence: float = 0.0
    """Awake seconds since it last advanced."""
    threshold: float = 0.0
    """The silence its evidence allows (0: none measured)."""
    source: str = ""
    """Where ``threshold`` came from: ``default``, ``max_gap``, ``quantile`` or ``given``."""


@attrs.frozen
class Recorded:
    """Harness to daemon (revision 4): the prompt ``prompt_id`` is in the transcript, taken by
    the engine (or found there, taken by an earlier harness of the session)."""

    prompt_id: str
    """The prompt the engine has recorded in the transcript."""


@attrs.frozen
class TurnEnded:
    """Harness to daemon (revision 6): the turn of ``prompt_id`` is over, and how it went, as
    its transcript says (ADR 0051). Sent again (``again``) on each new connection for the
    last few turns, so a daemon that was away learns them."""

    prompt_id: str
    """The prompt whose turn ended."""
    failure: str = ""
    """Why it failed (``http``, ``unreachable``, ``cut``, ...; empty: it did not)."""
    status: int = 0
    """The failure's status (an HTTP status; 0: none)."""
    detail: str = ""
    """The failure in a sentence, as the transcript has it."""
    reply: str = ""
    """The turn's last assistant message (cut to ``REPLY_LIMIT`` characters)."""
    again: bool = False
    """Reported before, to this daemon or an earlier one."""

    @property
    def failed(self) -> bool:
        """Whether the turn failed."""
        return bool(self.failure)

    def brief(self) -> str:
        """``ok``, or the failure and its status (``http:429``): no spaces, for ps."""
        if not self.failure:
            return "ok"
        return f"{self.failure}:{self.status}" if self.status else self.failure


@attrs.frozen
class Inspect:
    """Daemon to harness (revision 5): answer with a snapshot of your tasks, tools and turn
    (``tether inspect``), from the connection loop itself."""

    seq: int
    """The number the ``Inspection`` repeats."""


@attrs.frozen
class Inspection:
    """Harness to daemon (revision 5): the answer to ``Inspect(seq)``."""

    seq: int
    """The ``Inspect``'s number."""
    snapshot: dict[str, Any] = attrs.field(factory=dict)
    """``tether.inspect.snapshot()`` with the harness's sections, or ``{"error": why}``."""


@attrs.frozen
class Bye:
    """Either side: I am closing this connection, and why."""

    reason: str
    """Why the connection ends."""


@attrs.frozen
class Error:
    """Either side: your last frame was refused, and why; the connection closes."""

    reason: str
    """What went wrong."""
    code: int = 0
    """A sysexits code for a command-line client to exit with (0: unspecified)."""


@attrs.frozen
class Control:
    """A command-line client to the daemon, first and only request on its connection:
    ``op`` is ``ps``, ``start``, ``send``, ``stop``, ``reset``, ``events``, ``logs`` or
    ``inspect``."""

    op: str
    """The request: ``start``, ``send``, ``stop``, ``ps``, ``reset``, ..."""
    session: str = ""
    """The session it is about."""
    text: str = ""
    """The prompt, for ``send``."""
    create: bool = False
    """``send``, ``stop``, ``reset``: act on a session that does not exist yet."""
    follow: bool = False
    """``events``, ``logs``: keep streaming what comes after."""
    lines: int = 0
    """``events``, ``logs``: how many past lines first (0: the command's default)."""
    wait: bool = True
    """``send``: answer once the prompt is recorded (``False``: once it is queued)."""
    prompt_id: str = ""
    """``send``: the prompt's id, chosen by the client, so that sending it again (after a
    timeout, or a daemon that died mid-request) is the same prompt, delivered once (empty:
    the daemon picks one)."""
    wait_reply: bool = False
    """``send``: answer once the prompt's turn has ended, with how it went (``turn``)."""


@attrs.frozen
class Reply:
    """Daemon to a command-line client: the result of its ``Control`` (refusals are ``Error``);
    ``events`` and ``logs`` answer with one ``Reply`` per item, and ``{"end": true}`` last
    unless they follow."""

    result: dict[str, Any] = attrs.field(factory=dict)
    """The outcome, as a dict (``Attached``, ``Delivered``, ... or an error)."""


Message = (
    Hello
    | Welcome
    | Superseded
    | Prompt
    | Nudge
    | Ping
    | Pong
    | Recorded
    | TurnEnded
    | Inspect
    | Inspection
    | Bye
    | Error
    | Control
    | Reply
)
"""Any message of the wire."""
MESSAGE_TYPES: tuple[type[Any], ...] = (
    Hello,
    Welcome,
    Superseded,
    Prompt,
    Nudge,
    Ping,
    Pong,
    Recorded,
    TurnEnded,
    Inspect,
    Inspection,
    Bye,
    Error,
    Control,
    Reply,
)


def tag_of(cls: type[Any]) -> str:
    """The ``type`` tag of a message class: its name in snake_case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _json_type(annotation: object) -> type:
    # Annotations are strings here (``from __future__ import annotations``).
    text = str(annotation)
    if text.startswith("dict"):
        return dict
    return {"str": str, "int": int, "float": float, "bool": bool}[text]


TAGS: dict[str, type[Any]] = {tag_of(cls): cls for cls in MESSAGE_TYPES}
FIELD_TYPES: dict[type[Any], tuple[tuple[str, type], ...]] = {
    cls: tuple((field.name, _json_type(field.type)) for field in attrs.fields(cls))
    for cls in MESSAGE_TYPES
}
OPTIONAL: dict[type[Any], frozenset[str]] = {
    cls: frozenset(f.name for f in attrs.fields(cls) if f.default is not attrs.NOTHING)
    for cls in MESSAGE_TYPES
}
"""Fields with a default: a peer of an earlier revision may leave them out."""
DEFAULTS: dict[type[Any], dict[str, Any]] = {
    cls: {
        f.name: f.default
        for f in attrs.fields(cls)
        if f.default is not attrs.NOTHING and not isinstance(f.default, attrs.Factory)  # type: ignore[arg-type]
    }
    for cls in MESSAGE_TYPES
}
"""Plain defaults: a field at its default is not sent."""
