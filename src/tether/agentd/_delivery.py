"""``Outbox``: a prompt is queued durably in the store, then handed to the session's harness,
starting or replacing it, until one records it; at most ``delivery_attempts`` harnesses end
before they do (ADR 0011, ADR 0034).

A prompt counts as delivered once the harness reports it recorded in the transcript, which it
is as the engine takes it (``Recorded``, wire revision 4); for an older harness, once its
connection loop has read it (a ping sent after it was answered, within ``patience`` of awake
time). Until then it stays queued in the store, and a harness that ends first (death, phantom
or stall replacement, a lost link) is an attempt that failed: the next harness is sent the same
``id``, and a harness whose transcript already holds that id reports it at once without giving
it to its engine again. So delivery over the wire is at least once, and at the engine exactly
once. A prompt no harness could be sent (over the frame limit) is refused before it is queued,
so it is never stored and never retried.
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

MAX_RELINKS = 8
"""Times a prompt is sent again to the same live harness after its link dropped, before those
drops count as failed attempts (a harness that keeps losing its link is not healthy)."""
RELINK_DELAY = 0.05
"""Seconds before asking a harness again whose link just dropped (it is reconnecting)."""


STOPPED = "the daemon is stopping; the prompt stays queued for the next one"


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
    stopped: bool = attrs.field(default=False, init=False)
    """The daemon is stopping: no delivery starts or goes on (what is queued stays queued)."""
    _deliveries: set[trio.CancelScope] = attrs.field(factory=set, init=False)

    def stop(self) -> None:
        """End every delivery now, settling none: a stopping daemon must not start a harness
        to deliver to (it would outlive it), and the next daemon redelivers what is queued."""
        self.stopped = True
        for scope in self._deliveries:
            scope.cancel()

    async def deliver(self, session_name: str, prompt: str | Prompt) -> Delivered:
        """See ``Agentd.deliver``."""
        session, prompt = await self.queue(session_name, prompt)
        return await self._deliver_queued(session, prompt)

    async def queue(self, session_name: str, prompt: str | Prompt) -> tuple[Session, Prompt]:
        """Queue ``prompt`` durably; the session and the prompt (with its id).

        Raises:
            PromptTooLarge, ValueError: it cannot be framed; it was not queued.
            DeliveryFailed: this host may not accept it, or the store would not queue it.
        """
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
        return session, prompt

    async def deliver_later(self, session: Session, prompt: Prompt) -> None:
        """Deliver a queued prompt nobody waits for (``tether send --no-wait``); a failure is
        an event and a settlement, not an exception."""
        with contextlib.suppress(DeliveryFailed):
            await self._deliver_queued(session, prompt)

    async def _deliver_queued(self, session: Session, prompt: Prompt) -> Delivered:
        if not self.stopped:
            with trio.CancelScope() as scope:
                self._deliveries.add(scope)
                try:
                    return await self._deliver_now(session, prompt)
                finally:
                    self._deliveries.discard(scope)
        raise DeliveryFailed(session.name, prompt.id, [STOPPED])

    async def _deliver_now(self, session: Session, prompt: Prompt) -> Delivered:
        failures: list[str] = []
        queued = trio.current_time()
        attempt = relinks = 0
        while attempt < self.settings.delivery_attempts:
            with contextlib.suppress(StoreUnavailable):
                await self.store.attempted(session.name, prompt.id)
            harness = session.harness
            outcome = await self._attempt(session, prompt)
            if (
                isinstance(outcome, str)
                and harness is not None
                and harness is session.harness
                and harness.usable
                and relinks < MAX_RELINKS
            ):  # the same harness only lost its link: it may hold the prompt; ask it again
                relinks += 1
                await trio.sleep(RELINK_DELAY)
                continue
            attempt += 1
            if isinstance(outcome, tuple):
                attached, recorded = outcome
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
                return Delivered(
                    session.name, prompt.id, attached.pid, attached.epoch, attempt, recorded
                )
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

    async def _attempt(
        self, session: Session, prompt: Prompt
    ) -> tuple[Attached, bool] | str | _Final:
        """Hand ``prompt`` to the session's harness (started if need be) and wait until it is
        recorded: the harness and whether it recorded it (``False``: an older harness only
        read it), or why the attempt failed."""
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
        # No deadline of the outbox's own on a harness that records: a full socket or a busy
        # engine is waited for while the harness is judged healthy, and one that is not is
        # replaced, which closes the link and ends the wait.
        if not await link.send(prompt):
            return "the connection closed before the prompt was sent"
        if link.records:
            if await link.wait_recorded(prompt.id):
                return attached, True
            return "the harness ended before its engine took the prompt"
        patience = self.settings.patience
        if await link.clock.within(patience, link.roundtrip):
            return attached, False
        if link.closed:
            return "the connection closed before the harness read the prompt"
        return f"the harness did not confirm the prompt within {patience:.1f}s of awake time"

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
