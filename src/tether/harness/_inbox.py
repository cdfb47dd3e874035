"""``Inbox``: the prompts between the connection loop and the engine, each recorded in the
transcript as the engine takes it, so a delivery counts once it is recorded (ADR 0034).

The loop puts every ``Prompt`` and ``Nudge`` here and never waits. ``pump`` hands them to the
engine's channel one at a time, and only while the engine is asking for one (its receiver is
observed): a prompt is first made durable as a user message carrying its id, then sent, so a
prompt the engine never asked for is not recorded and its daemon delivers it again to the next
harness. An id the transcript already holds, or one already waiting here, never reaches the
engine again: delivery over the wire is at least once, at the engine exactly once. Each id
recorded (or found recorded) is queued for the loop to report to the daemon (``Recorded``).
When the engine comes back to its channel after a prompt with nothing waiting, the end of that
turn is recorded too (``turn_done``), so a later harness knows which turn a death cut short.
Each turn's end (that, or the next prompt's record) is reported with how the turn went
(``TurnEnded``, from the transcript: ``turn_outcome``), and the last few again on each new
connection.
"""

from __future__ import annotations

import collections
import logging

import attrs

from .. import _backend
from ..channels import Sender, SendError
from ..journal import Event, Message, Transcript
from ..wire import Prompt, Recorded, TurnEnded
from ._context import Command
from ._outcome import TURN_ABORTED, TURN_DONE, turn_outcome

logger = logging.getLogger("tether.harness")

MAX_UNREPORTED = 10_000
"""Reports kept for a daemon that is away (a daemon that missed older ones asks again)."""
RESENT_TURNS = 8
"""The last turns' outcomes reported again on each new connection (``TurnEnded.again``)."""

Report = Recorded | TurnEnded
"""What the loop tells the daemon for the inbox."""


class Inbox:
    """Prompts for one engine: ``put`` by the loop, ``pump``ed into the engine's channel,
    their ids ``reported`` back."""

    def __init__(self, transcript: Transcript, open_turn: str | None = None) -> None:
        self.transcript = transcript
        self._waiting: collections.deque[Command] = collections.deque()
        self._queued: set[str] = set()
        self._unreported: collections.deque[Report] = collections.deque(maxlen=MAX_UNREPORTED)
        self._ended: collections.deque[TurnEnded] = collections.deque(maxlen=RESENT_TURNS)
        self._asking = False
        """The engine is back at its channel and has taken nothing since."""
        self._recording: str | None = None
        """The prompt whose record is being made durable (not yet to be reported)."""
        self._open_turn = open_turn
        """The prompt whose turn the engine is in (its end not yet recorded): at first, the
        one an earlier harness's death cut short, which the engine may resume."""
        self._changed = _backend.event()
        self._reported = _backend.event()

    def __repr__(self) -> str:
        return f"<Inbox waiting={len(self._waiting)} unreported={len(self._unreported)}>"

    def put(self, command: Command) -> None:
        """Take a command from the daemon: a prompt already recorded is only reported again,
        one already waiting is dropped; never blocks."""
        if isinstance(command, Prompt):
            if command.id in self._queued or command.id == self._recording:
                return  # reported once its record is durable
            if self.transcript.has_prompt(command.id):
                self._report(Recorded(command.id))
                return
            self._queued.add(command.id)
        self._waiting.append(command)
        self._wake()

    # -- the engine's receiver calls these (``Receiver.observe``) ------------------------------

    def waiting(self) -> None:
        self._asking = True
        self._wake()

    def took(self, item: object) -> None:
        self._asking = False
        if isinstance(item, Prompt):
            self._open_turn = item.id

    # -- the loop's side --------------------------------------------------------------------

    async def reported(self) -> list[Report]:
        """Wait until some prompts are recorded or turns ended, not yet reported; take them
        all, in order."""
        while not self._unreported:
            await self._reported.wait()
            self._reported = _backend.event()
        reports = list(self._unreported)
        self._unreported.clear()
        self._ended.extend(report for report in reports if isinstance(report, TurnEnded))
        return reports

    def ended(self) -> list[TurnEnded]:
        """The last turns' outcomes taken for a daemon, marked ``again``: for a new
        connection's daemon (one still waiting here goes once, unmarked)."""
        return [attrs.evolve(outcome, again=True) for outcome in self._ended]

    async def pump(self, commands: Sender[Command]) -> None:
        """Hand each waiting command to the engine as it asks, recording prompts first;
        returns once the engine's channel is closed.

        Raises:
            JournalError: a prompt could not be recorded (it was not given to the engine).
        """
        while True:
            while not (self._asking and (self._waiting or self._open_turn)):
                await self._changed.wait()
                self._changed = _backend.event()
            # Shielded: once recorded, a prompt must reach the channel (the append itself
            # cannot be cancelled part way, and is bounded by the disk).
            with _backend.cancel_scope(shield=True):
                if not self._waiting:
                    await self._end_turn()
                    continue
                command = self._waiting.popleft()
                if isinstance(command, Prompt):
                    self._queued.discard(command.id)
                    await self._record(command)
                try:
                    commands.try_send(command)
                except SendError:
                    return
                # Given one: the engine asks again only when it comes back to its channel. Left
                # set until its receive ran, the next prompt was recorded (and handed over)
                # into the same turn (issue 41: a burst of sends answered as one).
                self._asking = False

    async def _record(self, prompt: Prompt) -> None:
        self._recording = prompt.id
        try:
            await self.transcript.append_message("user", prompt.text, prompt_id=prompt.id)
        finally:
            self._recording = None
        ended, self._open_turn = self._open_turn, None  # this record ends the turn before it
        if ended is not None:
            self._turn_ended(ended)
        self._report(Recorded(prompt.id))

    async def _end_turn(self) -> None:
        prompt_id, self._open_turn = self._open_turn, None
        if prompt_id is not None:
            await self.transcript.event(TURN_DONE, {"prompt_id": prompt_id})
            self._turn_ended(prompt_id)

    def _turn_ended(self, prompt_id: str) -> None:
        self._unreported.append(turn_outcome(self.transcript.entries, prompt_id))
        self._reported.set()

    async def seal(self, reason: str) -> None:
        """Record that the turn the engine is in (if any) was cut short, and why."""
        prompt_id, self._open_turn = self._open_turn, None
        if prompt_id is not None:
            await seal_turn(self.transcript, prompt_id, reason)

    def _report(self, report: Report) -> None:
        self._unreported.append(report)
        self._reported.set()

    def _wake(self) -> None:
        self._changed.set()


async def seal_turn(transcript: Transcript, prompt_id: str, reason: str) -> None:
    """Record the end of ``prompt_id``'s turn as cut short (``turn_aborted``), durably."""
    await transcript.event(TURN_ABORTED, {"prompt_id": prompt_id, "reason": reason})


def last_turn(transcript: Transcript) -> tuple[Message, bool] | None:
    """The last recorded prompt if its turn never ended (no later prompt, no ``turn_done``):
    the turn a death cut short, and whether a ``turn_aborted`` already seals it."""
    sealed = False
    for entry in reversed(transcript.entries):
        if isinstance(entry, Message) and entry.prompt_id is not None:
            return entry, sealed
        if isinstance(entry, Event):
            if entry.kind == TURN_DONE:
                return None
            sealed = sealed or entry.kind == TURN_ABORTED
    return None
