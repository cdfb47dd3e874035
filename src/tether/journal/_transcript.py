"""``Transcript``: a session's JSON-lines journal, where a tool call is durable before it runs.

Every append is encoded in the trio thread, then written and fsynced by ``_disk.append`` on the
transcript's own worker thread, so the run never blocks on the disk. Concurrent appends in one
process are serialized and group-committed: one write and one fsync for everything queued
while the previous one was in flight (ADR 0006). A lock file refuses a second writer process,
naming its pid.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar, final

import attrs
import trio
import trio.lowlevel

from .._util import NoPublicConstructor
from .._worker import Worker
from . import _disk
from ._disk import JournalError, Repair
from ._entries import STATUSES, Entry, Event, Message, ToolCall, ToolResult, new_id, now

logger = logging.getLogger("tether.journal")

RESUME_REASON = "session resumed after an unclean shutdown"
E = TypeVar("E", bound=Entry)


@attrs.define(eq=False)
class _Pending:
    """Entries waiting for their write and fsync."""

    entries: list[Any]
    data: bytes
    done: trio.Event = attrs.field(factory=trio.Event)
    error: JournalError | None = None


@final
class Transcript(metaclass=NoPublicConstructor):
    """An open transcript: the entries so far, and durable appends.

    Open it with ``await Transcript.open(path)``; close it with ``aclose()`` or ``async with``.
    """

    def __init__(
        self, path: str, entries: list[Entry], size: int, fd: int, lock_fd: int, worker: Worker
    ) -> None:
        self.path = path
        self.repair: Repair | None = None
        """What opening had to repair, or ``None``."""
        self._entries = entries
        self._size = size
        self._fd: int | None = fd
        self._lock_fd = lock_fd
        self._worker = worker
        self._queue: list[_Pending] = []
        self._flushing = False
        self._flushed = trio.Event()
        self._flushed.set()
        self._next_seq = entries[-1].seq + 1 if entries else 1
        self._broken: JournalError | None = None
        self._calls: dict[str, ToolCall] = {}
        self._results: set[str] = set()
        """Calls with a durable result."""
        self._answered: set[str] = set()
        """Calls with a result, durable or queued: a second one is refused at once."""
        self.last_append = time.monotonic()
        """When an append last became durable (``time.monotonic``: awake time): progress."""
        self.unmatched_results: list[ToolResult] = []
        """Results whose call is unknown or already answered: kept in the file, reported here."""
        for entry in entries:
            self._index(entry)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        resume: bool = False,
        reason: str | None = None,
    ) -> Transcript:
        """Open (or create) the transcript at ``path``, repairing a torn or corrupt tail.

        Every valid entry is kept, in order; each line that is not one (a torn last line, a
        corrupt line anywhere) is moved byte for byte to ``<path>.corrupt-<ts>``, and an
        ``event`` entry (``kind="quarantined"``) records how many bytes, why, and the offset and
        length of each span. A result that survives is never sealed again. With
        ``resume=True`` every dangling tool call is sealed with an ``aborted``
        result giving ``reason`` (default: "session resumed after an unclean shutdown").

        Raises:
            JournalError: the file is missing (``create=False``), unreadable, unwritable, or
                held by another writer (the message names its pid).
        """
        path = os.fspath(path)
        worker = Worker(f"tether journal {path}")
        try:
            lock_fd = await worker.run(_disk.lock, path)
        except BaseException:
            worker.stop()
            raise
        try:
            loaded = await worker.run(lambda: _disk.load(path, create=create))
            fd = await worker.run(_disk.open_for_append, path)
        except BaseException:
            os.close(lock_fd)
            worker.stop()
            raise
        transcript = cls._create(path, loaded.entries, loaded.size, fd, lock_fd, worker)
        try:
            if loaded.repair is not None:
                transcript.repair = loaded.repair
                logger.warning(
                    "%s: kept %d entries; moved %d bytes (%s) to %s",
                    path,
                    loaded.repair.kept_entries,
                    loaded.repair.quarantined_bytes,
                    loaded.repair.reason,
                    loaded.repair.quarantine,
                )
                await transcript.event("quarantined", _quarantined(loaded.repair))
            for result in transcript.unmatched_results:
                logger.warning(
                    "%s: result %s answers no open call %s", path, result.id, result.call_id
                )
            if resume:
                await transcript.seal_dangling(reason or RESUME_REASON)
        except BaseException:
            await transcript.aclose()
            raise
        return transcript

    def __repr__(self) -> str:
        return (
            f"<tether.Transcript {self.path!r} entries={len(self._entries)}"
            f" dangling={len(self.dangling())}>"
        )

    @property
    def entries(self) -> Sequence[Entry]:
        """Every entry, in order."""
        return tuple(self._entries)

    def dangling(self) -> list[ToolCall]:
        """The tool calls that have no result yet, in order."""
        return [call for call_id, call in self._calls.items() if call_id not in self._answered]

    async def tool_call(self, name: str, args: dict[str, Any]) -> ToolCall:
        """Record a tool call durably (written and fsynced) before returning it.

        Raises:
            JournalError: it is not durable; the tool must not run.
        """
        (call,) = await self._append(lambda seq: [ToolCall(new_id("call"), seq, now(), name, args)])
        return call

    async def tool_result(
        self, call_id: str, output: Any, status: str = "ok", *, reason: str | None = None
    ) -> ToolResult:
        """Record the terminal result of a call (``ok``, ``error`` or ``aborted``), durably.

        Raises:
            ValueError: the call is unknown, already answered, or ``status`` is invalid.
            JournalError: the result is not durable.
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        if call_id not in self._calls:
            raise ValueError(f"{self.path}: no tool call {call_id!r}")
        if call_id in self._answered:
            raise ValueError(f"{self.path}: tool call {call_id!r} already has a result")
        (result,) = await self._append(
            lambda seq: [ToolResult(new_id("result"), seq, now(), call_id, status, output, reason)]
        )
        return result

    async def append_message(self, role: str, content: str) -> Message:
        """Record a message of the conversation, durably."""
        (message,) = await self._append(
            lambda seq: [Message(new_id("msg"), seq, now(), role, content)]
        )
        assert isinstance(message, Message)
        return message

    async def event(self, kind: str, data: dict[str, Any]) -> Event:
        """Record an event (a repair, a shutdown, a signal...), durably."""
        (event,) = await self._append(lambda seq: [Event(new_id("event"), seq, now(), kind, data)])
        return event

    async def seal_dangling(self, reason: str) -> list[ToolResult]:
        """Give every dangling call an ``aborted`` result naming ``reason``; one fsync for all.

        Every call is sealed, not only the first, so a resumed session sees complete exchanges.
        """

        def results(seq: int) -> list[ToolResult]:
            return [
                ToolResult(new_id("result"), seq + i, now(), call.id, "aborted", None, reason)
                for i, call in enumerate(self.dangling())
            ]

        sealed = await self._append(results)
        for result in sealed:
            logger.info("%s: sealed tool call %s: %s", self.path, result.call_id, reason)
        return sealed

    async def _append(self, build: Callable[[int], list[E]]) -> list[E]:
        """Make ``build(next_seq)``'s entries durable; group-commit with concurrent appends.

        Appends queue up while a write is in flight; whichever task finds no flush running
        writes everything queued with one write and one fsync, shielded, so a cancelled task
        never strands the entries of others.
        """
        if self._fd is None:
            raise trio.ClosedResourceError(f"transcript {self.path} is closed")
        if self._broken is not None:
            failed = f"an earlier append failed: {self._broken.strerror}"
            raise JournalError(self._broken.errno, failed, self.path)
        entries = build(self._next_seq)
        if not entries:
            await trio.lowlevel.checkpoint()
            return []
        data = _disk.encode_all(entries)  # first: a value it refuses changes nothing
        self._next_seq += len(entries)
        for entry in entries:
            if isinstance(entry, ToolResult):
                self._answered.add(entry.call_id)  # now, so a concurrent duplicate is refused
        pending = _Pending(list(entries), data)
        self._queue.append(pending)
        if not self._flushing:
            with trio.CancelScope(shield=True):
                await self._flush()
        if not pending.done.is_set():  # another task's flush writes it
            await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        self.last_append = time.monotonic()
        return entries

    async def _flush(self) -> None:
        self._flushing = True
        self._flushed = trio.Event()
        try:
            while self._queue and self._fd is not None:
                batch, self._queue = self._queue, []
                data = b"".join(p.data for p in batch)
                try:
                    self._size = await self._worker.run(
                        _disk.append, self._fd, data, self._size, self.path
                    )
                except JournalError as exc:
                    self._broken = exc
                    batch += self._queue
                    self._queue = []
                    for p in batch:
                        p.error = exc
                        p.done.set()
                    return
                for p in batch:
                    for entry in p.entries:
                        self._entries.append(entry)
                        self._index(entry)
                    p.done.set()
        finally:
            self._flushing = False
            self._flushed.set()

    def _index(self, entry: Entry) -> None:
        if isinstance(entry, ToolCall):
            self._calls[entry.id] = entry
        elif isinstance(entry, ToolResult):
            if entry.call_id not in self._calls or entry.call_id in self._results:
                self.unmatched_results.append(entry)
            self._results.add(entry.call_id)
            self._answered.add(entry.call_id)

    async def aclose(self) -> None:
        """Wait for queued appends, close the file and release the lock; idempotent."""
        while self._flushing:
            await trio.lowlevel.checkpoint()  # the flusher is shielded and bounded by the disk
        if self._fd is not None:
            fd, self._fd = self._fd, None
            await self._worker.run(os.close, fd)
            os.close(self._lock_fd)
            self._worker.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


_SPANS_SHOWN = 100


def _quarantined(repair: Repair) -> dict[str, Any]:
    """The ``quarantined`` event's data: the first ``_SPANS_SHOWN`` spans by offset and length
    (the quarantine file holds their bytes in the same order)."""
    return {
        "bytes": repair.quarantined_bytes,
        "file": os.path.basename(repair.quarantine),
        "reason": repair.reason,
        "spans": [[d.offset, d.length] for d in repair.damage[:_SPANS_SHOWN]],
        "span_count": len(repair.damage),
    }
