"""``Outbox``: a prompt is queued durably in the store, then handed to the session's harness,
starting or replacing it, at most ``delivery_attempts`` times (ADR 0011).

A prompt counts as delivered once the harness's connection loop has read it: a ping sent after
it was answered. Delivery is at least once: after a daemon crash, queued prompts are sent again
with the same ``id``. A prompt no harness could be sent (over the frame limit) is refused
before it is queued, so it is never stored and never retried.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

import attrs
import trio

from ..epochs import EpochStore, OwnedElsewhere, QueuedPrompt, StoreUnavailable
from ..wire import FrameTooLarge, Prompt, ProtocolError, encode
from ._counts import Counts
from ._events import EventKind
from ._lease import HostLease
from ._model import Session
from ._outcomes import REFUSED, Attached, Delivered, DeliveryFailed, PromptTooLarge
from ._registry import Sessions
from ._settings import Settings
from ._starter import Starter
from ._state import SessionState

logger = logging.getLogger("tether.agentd")


@attrs.frozen
class _Final:
    """A failed delivery attempt that another attempt cannot mend (the session belongs to
    another host, or the store is unreachable)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


@attrs.define(eq=False)
class Outbox:
    """Queues, delivers and redelivers prompts."""

    settings: Settings
    store: EpochStore
    lease: HostLease
    sessions: Sessions
    starter: Starter
    counts: Counts = attrs.field(factory=Counts)

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered:
        """See ``Agentd.deliver``."""
        if isinstance(prompt, str):
            prompt = Prompt(uuid.uuid4().hex, prompt, {})
        check_framable(session_name, prompt)  # first: a refused prompt touches nothing
        session = self.sessions.get(session_name)
        if not self.lease.confirmed():
            error = DeliveryFailed(session.name, prompt.id, [f"not accepted: {self.lease.lost()}"])
            self.sessions.emit(
                session, EventKind.DELIVERY_FAILED, None, error.reason, prompt_id=prompt.id,
                reason=error.reason,
            )  # fmt: skip
            raise error
        try:
            await self.store.enqueue(
                QueuedPrompt(session.name, prompt.id, prompt.text, prompt.meta)
            )
        except StoreUnavailable as exc:
            raise DeliveryFailed(session.name, prompt.id, [f"not queued: {exc}"]) from None
        failures: list[str] = []
        queued = trio.current_time()
        for attempt in range(1, self.settings.delivery_attempts + 1):
            with contextlib.suppress(StoreUnavailable):
                await self.store.attempted(session.name, prompt.id)
            outcome = await self._attempt(session, prompt)
            if isinstance(outcome, Attached):
                detail = f"prompt {prompt.id} attempt {attempt}"
                self.sessions.emit(
                    session, EventKind.DELIVERED, session.harness, detail, prompt_id=prompt.id,
                    attempt=attempt,
                )  # fmt: skip
                try:
                    await self.store.settle(session.name, prompt.id, "delivered")
                except StoreUnavailable as exc:  # delivered all the same; redelivered later
                    logger.warning(
                        "session %s: prompt %s not settled: %s", session.name, prompt.id, exc
                    )
                self.counts.delivery(trio.current_time() - queued)
                return Delivered(session.name, prompt.id, outcome.pid, outcome.epoch, attempt)
            failures.append(f"attempt {attempt}: {outcome}")
            detail = f"prompt {prompt.id} attempt {attempt} failed: {outcome}"
            self.sessions.emit(
                session, EventKind.DELIVERY_ATTEMPT, session.harness, detail,
                prompt_id=prompt.id, attempt=attempt, reason=str(outcome),
            )  # fmt: skip
            if (
                session.state is SessionState.FAILED
                or not self.lease.confirmed()
                or isinstance(outcome, _Final)
            ):
                break
        error = DeliveryFailed(session.name, prompt.id, failures)
        self.counts.failure()
        self.sessions.emit(
            session, EventKind.DELIVERY_FAILED, None, error.reason, prompt_id=prompt.id,
            attempt=len(failures), reason=error.reason,
        )  # fmt: skip
        with contextlib.suppress(StoreUnavailable):
            await self.store.settle(session.name, prompt.id, f"failed: {error.reason}")
        raise error

    async def _attempt(self, session: Session, prompt: Prompt) -> Attached | str | _Final:
        try:
            attached = await self.starter.start(session, nudge=False)
        except (OwnedElsewhere, StoreUnavailable) as exc:
            return _Final(str(exc))
        except REFUSED as exc:
            return str(exc)
        harness = session.harness
        link = harness.link if harness is not None else None
        if link is None:
            return "the harness lost its connection before the prompt was sent"
        patience = self.settings.patience
        with trio.move_on_after(patience):
            if await link.send(prompt) and await link.roundtrip():
                return attached
            return "the connection closed before the harness read the prompt"
        return f"the harness did not confirm the prompt within {patience:.1f}s"

    async def redeliver(self, queued: QueuedPrompt) -> None:
        """Deliver a prompt queued before a restart or a takeover, unless its session belongs
        to another live host (the prompt stays queued for that host)."""
        prompt = Prompt(queued.id, queued.text, queued.meta)
        try:
            check_framable(queued.session, prompt)
        except ValueError as exc:  # queued by an older version: it could never be sent
            logger.error(  # noqa: TRY400 - the reason is the whole story
                "session %s: queued prompt %s dropped: %s", queued.session, queued.id, exc
            )
            with contextlib.suppress(StoreUnavailable):
                await self.store.settle(queued.session, queued.id, f"failed: {exc}")
            return
        with contextlib.suppress(DeliveryFailed, ValueError, StoreUnavailable):
            if await self.lease.owner(queued.session) is not None:
                return
            await self.deliver(queued.session, prompt)


def check_framable(session: str, prompt: Prompt) -> None:
    """Refuse a prompt that no harness could be sent.

    Raises:
        PromptTooLarge: its frame would exceed the wire's limit.
        ValueError: its ``meta`` cannot be framed.
    """
    try:
        encode(prompt)
    except FrameTooLarge as exc:
        raise PromptTooLarge(session, prompt.id, exc.size, exc.limit) from None
    except ProtocolError as exc:
        raise ValueError(f"session {session!r}: prompt {prompt.id}: {exc.reason}") from None
