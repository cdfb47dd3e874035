"""``GroupCommit``: what many tasks submit while one commit is in flight goes in the next one.

A durable append and an SQLite transaction each cost one sync of the disk, however much they
carry; so the transcript's appends and the epoch store's bumps are grouped: the task that finds
no commit in flight commits everything queued, in submission order, and goes on while more was
queued meanwhile. It runs shielded, so a cancelled submitter never strands the others' items;
or, for a commit that cannot be cancelled once it has begun (``shield=False``), without a
cancel scope for an uncontended commit, and shielded only while it commits the others'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import outcome

from . import _backend

T = TypeVar("T")
R = TypeVar("R")


class _Waiting(Generic[T, R]):
    __slots__ = ("done", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: outcome.Outcome[R] | None = None
        self.done: _backend.Event | None = None


class GroupCommit(Generic[T, R]):
    """Commits submitted items in groups: ``commit(items)`` returns one result per item, in
    order, or raises, which fails every item of that group with the same exception."""

    def __init__(
        self, commit: Callable[[Sequence[T]], Awaitable[Sequence[R]]], *, shield: bool = True
    ) -> None:
        self._commit = commit
        self._shield = shield
        """``False``: ``commit`` raises ``Cancelled`` only before it has begun, and otherwise
        finishes and leaves the cancellation to the next checkpoint (the transcript's does)."""
        self._queue: list[_Waiting[T, R]] = []
        self.committing = False
        """Whether a commit is in flight (a closing owner waits for it to end)."""
        self._contended = False
        """Others joined the last commit: the next committer yields first, so the tasks that
        commit woke can join it instead of one of them committing alone."""

    async def submit(self, item: T) -> R:
        """Commit ``item`` (with whatever else is queued) and return its result."""
        if self.committing:  # the task committing takes it in its next group
            waiting: _Waiting[T, R] = _Waiting(item)
            waiting.done = _backend.event()
            self._queue.append(waiting)
            await waiting.done.wait()
            assert waiting.result is not None
            return waiting.result.unwrap()
        self.committing = True
        joined: list[_Waiting[T, R]] = []
        try:
            with _backend.cancel_scope(shield=True) if self._shield else contextlib.nullcontext():
                try:
                    if self._contended:  # let the tasks the last group woke join this one
                        # Two passes: trio runs a batch of tasks in either order, so in one
                        # pass this task may run before the ones it woke.
                        await _backend.checkpoint()
                        await _backend.checkpoint()
                    joined, self._queue = self._queue, []
                    results = await self._commit([item, *(w.item for w in joined)])
                except (_backend.cancelled_class(), Exception) as exc:  # only without the shield
                    if isinstance(exc, _backend.cancelled_class()):
                        self._queue = joined + self._queue  # not begun: theirs still to do
                    else:
                        _fail(joined, exc)
                    await self._drain_shielded()
                    raise
                except BaseException as exc:  # nobody is left to drain what queued
                    _fail(joined + self._queue, exc)
                    self._queue = []
                    raise
                _settle(joined, results[1:])
                self._contended = bool(joined or self._queue)
                await self._drain_shielded()
        finally:
            self.committing = False
        return results[0]

    async def _drain_shielded(self) -> None:
        """What queued meanwhile is committed even if the committer is cancelled. Under
        asyncio the drain runs in a task of its own (``shielded``): the tasks its commits woke
        may queue more before this one resumes, so it looks again, and returns only when it
        sees nothing queued (the caller then stops committing without yielding first)."""
        while self._queue:
            await _backend.shielded(self._drain)

    async def _drain(self) -> None:
        """Commit what queued meanwhile, group by group, until nothing is left."""
        while self._queue:
            group, self._queue = self._queue, []
            try:
                results = await self._commit([w.item for w in group])
            except Exception as exc:  # noqa: BLE001 - every item of the group fails with it
                _fail(group, exc)
            except BaseException as exc:
                _fail(group + self._queue, exc)
                self._queue = []
                raise
            else:
                _settle(group, results)


def _settle(group: list[_Waiting[T, R]], results: Sequence[R]) -> None:
    for waiting, result in zip(group, results, strict=True):
        waiting.result = outcome.Value(result)
        assert waiting.done is not None
        waiting.done.set()


def _fail(group: list[_Waiting[T, R]], exc: BaseException) -> None:
    for waiting in group:
        waiting.result = outcome.Error(exc)
        assert waiting.done is not None
        waiting.done.set()
