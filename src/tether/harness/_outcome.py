"""``turn_outcome``: how a prompt's turn went, read from the transcript when the turn ends, for
the daemon (``TurnEnded``, ADR 0051).

The transcript is the one truth, so the outcome survives the harness: a turn whose harness
died is ended by the next one, and judged by what both wrote. After the prompt's record, an
event naming the prompt with a ``failure`` field (``turn_failed`` from ``ctx.fail_turn``, the
OpenAI engine's ``model_error``) fails the turn; ``turn_aborted`` (a death or a stop cut it)
fails it as ``cut``; ``turn_resumed`` starts it afresh. The reply is its last assistant message.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..journal import Entry, Event, Message
from ..wire import TurnEnded

TURN_DONE = "turn_done"
"""The transcript event that ends the turn of the prompt it names."""
TURN_ABORTED = "turn_aborted"
"""The transcript event that seals a turn cut short, with the reason."""
TURN_RESUMED = "turn_resumed"
"""The event before a resumed turn's first step: what follows answers a prompt whose turn a
death cut (its ``turn_aborted`` is earlier), up to that prompt's ``turn_done``."""
TURN_FAILED = "turn_failed"
"""The event ``HarnessContext.fail_turn`` writes: the turn failed, and why."""
CUT = "cut"
"""The failure of a turn that a death or a stop cut short and no harness resumed."""
REPLY_LIMIT = 16_384
"""Characters of the turn's reply a ``TurnEnded`` carries (the transcript has all of it)."""


def turn_outcome(entries: Sequence[Entry], prompt_id: str) -> TurnEnded:
    """How the turn of ``prompt_id`` went, from its record to the next prompt's (or the end)."""
    start = len(entries)
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if isinstance(entry, Message) and entry.prompt_id == prompt_id:
            start = index + 1
            break
    failure, status, detail, reply = "", 0, "", ""
    for entry in entries[start:]:
        if isinstance(entry, Message):
            if entry.prompt_id is not None:
                break  # the next prompt: this turn ended before it
            if entry.role == "assistant":
                reply = entry.content
            continue
        if not isinstance(entry, Event) or entry.data.get("prompt_id") != prompt_id:
            continue
        data = entry.data
        if entry.kind == TURN_RESUMED:
            failure, status, detail = "", 0, ""
        elif entry.kind == TURN_ABORTED:
            failure, status, detail = CUT, 0, str(data.get("reason", ""))
        elif isinstance(data.get("failure"), str) and data["failure"]:
            failure, detail = data["failure"], str(data.get("detail", ""))
            status = data["status"] if type(data.get("status")) is int else 0
    return TurnEnded(prompt_id, failure[:64], status, detail, reply[:REPLY_LIMIT])
