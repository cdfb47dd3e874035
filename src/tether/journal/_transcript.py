"""``Transcript``: a session's JSON-lines journal, where a tool call is durable before it runs.

Every append is encoded in the loop's thread, then made durable by the transcript's ``Sink``
(synced by the kernel's AIO, or on the transcript's own worker thread), so the run never
waits on the disk. Concurrent appends in one process are serialized and group-committed: one
write and one sync for everything queued while the previous one was in flight (ADR 0006, ADR
0027). A lock file refuses a second writer process, naming its pid.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self, TypeVar, final

from .. import _backend
from .._batch import GroupCommit
from .._util import NoPublicConstructor
from .._worker import Worker
from . import _disk, _relocate
from ._disk import JournalError, Repair
from ._entries import STATUSES, Entry, Event, Message, ToolCall, ToolResult, new_id, now
from ._relocate import Place
from ._sink import Sink

logger = logging.getLogger("tether.journal")

RESUME_REASON = "session resumed after an unclean shutdown"
E = TypeVar("E", bound=Entry)
_Append = tuple[list[Entry], bytes]
"""One append's entries and their encoded lines."""


@final
class Transcript(metaclass=NoPublicConstructor):
    """An open transcript: the entries so far, and durable appends.

    Open it with ``await Transcript.open(path)``; close it with ``aclose()`` or ``async with``.
    """

    def __init__(
        self, path: str, entries: list[Entry], sink: Sink, lock_fd: int, worker: Worker
    ) -> None:
        self.path = path
        """The transcript's file."""
        self.repair: Repair | None = None
        """What opening had to repair, or ``None``."""
        self._entries = entries
        self._sink: Sink | None = sink
        self._lock_fd = lock_fd
        self._worker = worker
        self._appends: GroupCommit[_Append, None] = GroupCommit(self._write, shield=False)
        self._next_seq = entries[-1].seq + 1 if entries else 1
        self._broken: JournalError | None = None
        self._calls: dict[str, ToolCall] = {}
        self._results: set[str] = set()
        """Calls with a durable result."""
        self._prompts: set[str] = set()
        """Ids of the prompts recorded, durable or queued: a second record is refused."""
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
        ``resume=True`` every dangling tool call is sealed with an ``interrupted``
        result giving ``reason`` (default: "session resumed after an unclean shutdown"); a
        call awaiting approval is left open, and one whose result line was damaged is
        answered ``result_lost`` (ADR 0036).

        The file holds plain JSON lines at every instant: each append grows it (``tail -f``
        follows it), and a zero tail an earlier version reserved is cut off here (ADR 0035).

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
            await worker.run(_relocate.restore, path)  # deleted while no writer held it
            loaded = await worker.run(lambda: _disk.load(path, create=create))
            tail = _disk.Tail(loaded.size, loaded.allocated)
            sink = await Sink.open(path, tail, worker)
            await worker.run(_relocate.point_keep, path, sink.fd)
        except BaseException:
            _disk.unlock(path, lock_fd)
            worker.stop()
            raise
        transcript = cls._create(path, loaded.entries, sink, lock_fd, worker)
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
                await transcript._seal(loaded.repair.lost_results, "result_lost", _lost(loaded))
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
        """The tool calls that have no result yet, in order, but those awaiting approval."""
        return [c for c in self._open() if c.awaiting is None]

    def awaiting(self) -> list[ToolCall]:
        """The calls that wait for a decision (``awaiting``): open, and never sealed."""
        return [c for c in self._open() if c.awaiting is not None]

    def _open(self) -> list[ToolCall]:
        return [call for call_id, call in self._calls.items() if call_id not in self._answered]

    async def tool_call(
        self, name: str, args: dict[str, Any], *, awaiting: str | None = None
    ) -> ToolCall:
        """Record a tool call durably (written and fsynced) before returning it; with
        ``awaiting="approval"``, one that waits for a person and is never sealed.

        Raises:
            JournalError: it is not durable; the tool must not run.
        """
        (call,) = await self._append(
            lambda seq: [ToolCall(new_id("call"), seq, now(), name, args, awaiting)]
        )
        return call

    async def tool_result(
        self, call_id: str, output: Any, status: str = "ok", *, reason: str | None = None
    ) -> ToolResult:
        """Record the terminal result of a call (a status of ``STATUSES``), durably.

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

    def has_prompt(self, prompt_id: str) -> bool:
        """Whether a message records the prompt ``prompt_id`` (durable, or being made so)."""
        return prompt_id in self._prompts

    async def append_message(
        self, role: str, content: str, *, prompt_id: str | None = None
    ) -> Message:
        """Record a message of the conversation, durably; with ``prompt_id``, as the record of
        that prompt (what makes a delivery count: ADR 0034).

        Raises:
            ValueError: ``prompt_id`` is already recorded.
            JournalError: the message is not durable.
        """
        if prompt_id is not None:
            if prompt_id in self._prompts:
                raise ValueError(f"{self.path}: prompt {prompt_id!r} is already recorded")
            self._prompts.add(prompt_id)
        try:
            (message,) = await self._append(
                lambda seq: [Message(new_id("msg"), seq, now(), role, content, prompt_id)]
            )
        except BaseException:
            if prompt_id is not None:
                self._prompts.discard(prompt_id)
            raise
        assert isinstance(message, Message)
        return message

    async def event(self, kind: str, data: dict[str, Any]) -> Event:
        """Record an event (a repair, a shutdown, a signal...), durably."""
        (event,) = await self._append(lambda seq: [Event(new_id("event"), seq, now(), kind, data)])
        return event

    async def seal_dangling(self, reason: str) -> list[ToolResult]:
        """Give every dangling call an ``interrupted`` result naming ``reason`` (the signal and
        its sender, a stall, a supersession, an unclean shutdown); one fsync for all. Calls
        awaiting approval are left open.

        Every call is sealed, not only the first, so a resumed session sees complete exchanges.
        """
        return await self._seal({c.id for c in self.dangling()}, "interrupted", reason)

    async def _seal(self, call_ids: Iterable[str], status: str, reason: str) -> list[ToolResult]:
        """Answer the open calls among ``call_ids`` with ``status`` and ``reason``, durably."""
        wanted = set(call_ids)
        calls = [c for c in self._open() if c.id in wanted]

        def results(seq: int) -> list[ToolResult]:
            return [
                ToolResult(new_id("result"), seq + i, now(), call.id, status, None, reason)
                for i, call in enumerate(calls)
            ]

        sealed = await self._append(results)
        for result in sealed:
            logger.info("%s: tool call %s %s: %s", self.path, result.call_id, status, reason)
        return sealed

    async def _append(self, build: Callable[[int], list[E]]) -> list[E]:
        """Make ``build(next_seq)``'s entries durable, group-committed with concurrent appends
        (one write and one sync for everything queued while the previous one was in flight).
        A cancel point before anything is done; after that, not cancellable (the sink's
        append finishes what it began)."""
        await _backend.checkpoint_if_cancelled()
        self._check_open()
        entries = build(self._next_seq)
        if not entries:
            await _backend.checkpoint()
            return []
        data = _disk.encode_all(entries)  # first: a value it refuses changes nothing
        self._next_seq += len(entries)
        for entry in entries:
            if isinstance(entry, ToolResult):
                self._answered.add(entry.call_id)  # now, so a concurrent duplicate is refused
        await self._appends.submit((list(entries), data))
        self.last_append = time.monotonic()
        return entries

    async def _write(self, appends: Sequence[_Append]) -> list[None]:
        """Write and sync one group of appends; index their entries once durable. The first
        failure breaks the transcript: every later append is refused until it is reopened.
        Raises ``Cancelled`` only before anything is written (the group commit relies on it)."""
        self._check_open()
        assert self._sink is not None
        data = appends[0][1] if len(appends) == 1 else b"".join(data for _, data in appends)
        try:
            await self._sink.append(data)
            where = _relocate.place(self.path, self._sink.held)
            if where is not Place.SAME:
                await self._moved(where)
        except JournalError as exc:
            self._broken = exc
            raise
        for entries, _ in appends:
            for entry in entries:
                self._entries.append(entry)
                self._index(entry)
        return [None] * len(appends)

    async def _moved(self, where: Place) -> None:
        """The path no longer names the open file (ADR 0045): recreate it from the open file if
        it is gone, and go on; if something else took it, keep a copy beside it and fail, so
        this group is not acknowledged.

        Raises:
            JournalError: ESTALE, naming the copy.
        """
        sink = self._sink
        assert sink is not None
        with _backend.cancel_scope(shield=True):
            if where is Place.GONE:
                try:
                    fd = await self._worker.run(_relocate.recreate, self.path, sink.fd, sink.tail)
                except JournalError as exc:
                    logger.warning("%s: deleted, and cannot be recreated: %s", self.path, exc)
                else:
                    await sink.move_to(fd)
                    logger.warning(
                        "%s: the file was deleted; recreated from the open file", self.path
                    )
                    return
            orphan = await self._worker.run(_relocate.save_orphan, self.path, sink.fd, sink.tail)
        kept = f"; what it held is in {os.path.basename(orphan)}" if orphan else ""
        raise JournalError(errno.ESTALE, f"the transcript file was replaced{kept}", self.path)

    def _check_open(self) -> None:
        if self._sink is None:
            raise _backend.closed_class()(f"transcript {self.path} is closed")
        if self._broken is not None:
            failed = f"an earlier append failed: {self._broken.strerror}"
            raise JournalError(self._broken.errno, failed, self.path)

    def _index(self, entry: Entry) -> None:
        if isinstance(entry, Message):
            if entry.prompt_id is not None:
                self._prompts.add(entry.prompt_id)
        elif isinstance(entry, ToolCall):
            self._calls[entry.id] = entry
        elif isinstance(entry, ToolResult):
            if entry.call_id not in self._calls or entry.call_id in self._results:
                self.unmatched_results.append(entry)
            self._results.add(entry.call_id)
            self._answered.add(entry.call_id)

    async def aclose(self) -> None:
        """Wait for queued appends, close the file and release the lock; idempotent."""
        while self._appends.committing:
            await _backend.checkpoint()  # the flusher is shielded and bounded by the disk
        if self._sink is not None:
            sink, self._sink = self._sink, None
            await sink.aclose()
            _disk.unlock(self.path, self._lock_fd)
            self._worker.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


_SPANS_SHOWN = 100


def _lost(loaded: _disk.Loaded) -> str:
    assert loaded.repair is not None
    quarantine = os.path.basename(loaded.repair.quarantine)
    return f"its result line was damaged; the bytes are in {quarantine}"


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
