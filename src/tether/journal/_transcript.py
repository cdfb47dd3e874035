"""``Transcript``: a session's JSON-lines journal, where a tool call is durable before it runs.

Every append is encoded in the trio thread, then written and fsynced by ``_disk.append`` in a
worker thread, one append at a time (a ``trio.Lock``), so concurrent writers in one process
serialize and the run never blocks on the disk; ADR 0006 says why not a writer task. A lock
file refuses a second writer process, naming its pid.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar, final

import trio

from .._util import NoPublicConstructor
from . import _disk
from ._disk import JournalError, Repair
from ._entries import STATUSES, Entry, Event, Message, ToolCall, ToolResult, new_id, now

logger = logging.getLogger("tether.journal")

RESUME_REASON = "session resumed after an unclean shutdown"
E = TypeVar("E", bound=Entry)


@final
class Transcript(metaclass=NoPublicConstructor):
    """An open transcript: the entries so far, and durable appends.

    Open it with ``await Transcript.open(path)``; close it with ``aclose()`` or ``async with``.
    """

    def __init__(self, path: str, entries: list[Entry], size: int, fd: int, lock_fd: int) -> None:
        self.path = path
        self.repair: Repair | None = None
        """What opening had to repair, or ``None``."""
        self._entries = entries
        self._size = size
        self._fd: int | None = fd
        self._lock_fd = lock_fd
        self._write_lock = trio.Lock()
        self._broken: JournalError | None = None
        self._calls: dict[str, ToolCall] = {}
        self._answered: set[str] = set()
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

        The valid prefix is kept; everything after it is moved byte for byte to
        ``<path>.corrupt-<ts>`` and an ``event`` entry (``kind="quarantined"``) records how many
        bytes. With ``resume=True`` every dangling tool call is sealed with an ``aborted``
        result giving ``reason`` (default: "session resumed after an unclean shutdown").

        Raises:
            JournalError: the file is missing (``create=False``), unreadable, unwritable, or
                held by another writer (the message names its pid).
        """
        path = os.fspath(path)
        lock_fd = await trio.to_thread.run_sync(_disk.lock, path)
        try:
            loaded = await trio.to_thread.run_sync(lambda: _disk.load(path, create=create))
            fd = await trio.to_thread.run_sync(_disk.open_for_append, path)
        except BaseException:
            os.close(lock_fd)
            raise
        transcript = cls._create(path, loaded.entries, loaded.size, fd, lock_fd)
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
                await transcript.event(
                    "quarantined",
                    {
                        "bytes": loaded.repair.quarantined_bytes,
                        "file": os.path.basename(loaded.repair.quarantine),
                        "reason": loaded.repair.reason,
                    },
                )
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
        async with self._write_lock:
            if self._fd is None:
                raise trio.ClosedResourceError(f"transcript {self.path} is closed")
            if self._broken is not None:
                raise JournalError(
                    self._broken.errno,
                    f"an earlier append failed: {self._broken.strerror}",
                    self.path,
                )
            seq = self._entries[-1].seq + 1 if self._entries else 1
            entries = build(seq)
            if not entries:
                await trio.lowlevel.checkpoint()
                return []
            data = _disk.encode_all(entries)
            fd, size = self._fd, self._size
            try:
                self._size = await trio.to_thread.run_sync(_disk.append, fd, data, size, self.path)
            except JournalError as exc:
                self._broken = exc
                raise
            for entry in entries:
                self._entries.append(entry)
                self._index(entry)
            return entries

    def _index(self, entry: Entry) -> None:
        if isinstance(entry, ToolCall):
            self._calls[entry.id] = entry
        elif isinstance(entry, ToolResult):
            if entry.call_id not in self._calls or entry.call_id in self._answered:
                self.unmatched_results.append(entry)
            self._answered.add(entry.call_id)

    async def aclose(self) -> None:
        """Close the file and release the lock; idempotent."""
        async with self._write_lock:
            if self._fd is not None:
                os.close(self._fd)
                os.close(self._lock_fd)
                self._fd = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
