"""Reference-counted strong senders, shared by every channel kind.

A channel's send half is open while at least one strong sender lives, as in Rust, where the
last ``Sender`` dropped closes the channel. Python has no deterministic drop for objects caught
in cycles and runs finalizers on whatever thread the garbage collector happens to run, so a
finalizer here never touches trio state itself. It hands the release to the run that last used
the channel through ``TrioToken.run_sync_soon``, which is thread-safe and re-entrant, and warns
with the handle's creation site. When that run is over no task can be parked on the channel, so
the release is plain bookkeeping on our own fields and touches nothing of trio's.

Every live strong sender has a record (name, ``file:line``, creating task) in ``live``: the same
dict is the reference count and the answer to "who keeps this channel open?" (``holders()``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, NoReturn, Self

import attrs
import trio
from outcome import Error

from .._util import caller_site

_is_finalizing = sys.is_finalizing


@attrs.frozen
class Holder:
    """One live strong sender: who keeps a channel open, and where it came from."""

    name: str
    """The sender's name: the channel's, unless ``clone(name=...)`` gave it its own."""
    site: str
    """Where the handle was created (``channel()``, ``clone()``, ``move()``...): ``file:line``."""
    task: str | None
    """The name of the trio task that created the handle; ``None`` outside a trio run."""


def current_token() -> trio.lowlevel.TrioToken | None:
    """The running trio run's token, or ``None`` outside a run."""
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


def current_task_name() -> str | None:
    """The name of the running trio task, or ``None`` outside one."""
    try:
        return trio.lowlevel.current_task().name
    except RuntimeError:
        return None


@attrs.define(slots=True, eq=False, repr=False)
class SharedState:
    """What every channel kind keeps about its strong senders."""

    name: str | None
    live: dict[int, tuple[str, str, int, str | None]] = attrs.field(factory=dict)
    """One record ``(name, file, line, task)`` per live strong sender: the reference count.
    When it becomes empty the send half of the channel is closed and ``_last_sender_gone`` runs."""
    token: trio.lowlevel.TrioToken | None = attrs.field(factory=current_token)
    """The trio run that last parked a task on this channel: where finalizers send releases."""
    tx_reason: str | None = None
    """Why the senders closed, as the last ``close(reason=...)`` of a sender said."""
    _next_key: int = 0
    kind: ClassVar[str] = "channel"

    @property
    def label(self) -> str:
        """How messages name this channel: ``channel 'cmd'`` or ``an unnamed channel``."""
        return f"{self.kind} {self.name!r}" if self.name else f"an unnamed {self.kind}"

    @property
    def tag(self) -> str:
        """How reprs name this channel: `` 'cmd'`` or nothing."""
        return f" {self.name!r}" if self.name else ""

    def acquire(self, name: str | None, depth: int) -> int:
        """Register a new strong sender created ``depth`` frames above the caller; its key."""
        key = self._next_key
        self._next_key = key + 1
        filename, line = caller_site(depth + 1)
        self.live[key] = (name or self.name or "sender", filename, line, current_task_name())
        return key

    def release(self, key: int) -> None:
        """Forget one strong sender; the last one closes the send half. Never raises."""
        if self.live.pop(key, None) is not None and not self.live:
            self._last_sender_gone()

    def _last_sender_gone(self) -> None:
        """Wake whoever waits for values that can no longer come."""

    def holders(self) -> tuple[Holder, ...]:
        """The live strong senders, oldest first."""
        return tuple(
            Holder(name, f"{filename}:{line}", task)
            for name, filename, line, task in self.live.values()
        )

    def site_of(self, key: int) -> str:
        """``name at file:line`` of a live sender, for messages."""
        record = self.live.get(key)
        if record is None:
            return "a sender"
        name, filename, line, _ = record
        return f"sender {name!r} created at {filename}:{line}"

    def call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in the run that owns this channel; safe from any thread."""
        token = self.token or current_token()
        if token is not None:
            try:
                token.run_sync_soon(fn, *args)
            except trio.RunFinishedError:
                pass
            else:
                return
        # No run is alive, so no task is parked here: the release is bookkeeping only.
        fn(*args)


class Closeable:
    """``with``, ``async with`` and ``aclose()`` for an endpoint with a synchronous ``close()``."""

    __slots__ = ()

    def close(self, reason: str | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def aclose(self) -> None:
        """``close()``, then a checkpoint."""
        self.close()
        await trio.lowlevel.checkpoint()


class StrongHandle(Closeable):
    """Base of every sender that keeps its channel open: close, move and the drop finalizer."""

    __slots__ = ("_key", "_moved_at", "_shared")

    _shared: SharedState
    _key: int | None
    """This handle's entry in ``_shared.live``; ``None`` once it is closed or moved."""
    _moved_at: str | None

    def _register(self, shared: SharedState, name: str | None, depth: int) -> None:
        self._shared = shared
        self._moved_at = None
        self._key = shared.acquire(name, depth + 1)

    def _unusable(self) -> NoReturn:
        if self._moved_at is not None:
            raise RuntimeError(
                f"this sender was moved at {self._moved_at}; use the handle move() returned"
            )
        raise trio.ClosedResourceError("this sender was closed")

    def _take_key(self, depth: int) -> int:
        """Retire this handle for ``move()``; the caller registers the new handle first."""
        key = self._key
        if key is None:
            self._unusable()
        filename, line = caller_site(depth + 1)
        self._moved_at = f"{filename}:{line}"
        self._key = None
        return key

    def _closing(self) -> None:
        """Hook: the handle is about to release its reference (wake its own parked tasks)."""

    @trio.lowlevel.enable_ki_protection
    def close(self, reason: str | None = None) -> None:
        """Drop this handle's reference; the last strong sender closed closes the channel.

        ``reason`` (``"superseded by epoch 8"``) is what the receiver's ``ChannelClosed.reason``
        says once the channel is closed. Idempotent, not a checkpoint, and a no-op on a handle
        that was moved.
        """
        key = self._key
        if key is None:
            return
        if reason is not None:
            self._shared.tx_reason = reason
        self._closing()
        self._key = None
        self._shared.release(key)

    def __del__(self) -> None:
        key = getattr(self, "_key", None)
        if key is None or _is_finalizing():
            return
        self._key = None
        shared = self._shared
        where = shared.site_of(key)
        shared.call_soon(shared.release, key)
        warnings.warn(
            f"{where} was dropped without close(); its finalizer closed it",
            ResourceWarning,
            stacklevel=1,
        )


async def park(waiters: dict[trio.lowlevel.Task, None], shared: SharedState) -> Any:
    """Park the current task in ``waiters`` until someone reschedules it; cancel-safe.

    ``custom_sleep_data`` names the channel, so a deadlock report can say what a task waits on.
    """
    task = trio.lowlevel.current_task()
    waiters[task] = None
    task.custom_sleep_data = shared
    shared.token = trio.lowlevel.current_trio_token()

    def abort(_: object) -> trio.lowlevel.Abort:
        del waiters[task]
        return trio.lowlevel.Abort.SUCCEEDED

    return await trio.lowlevel.wait_task_rescheduled(abort)


def wake_all(
    waiters: dict[trio.lowlevel.Task, Any],
    error: Callable[[], BaseException] | None = None,
) -> None:
    """Reschedule every parked task, oldest first, with ``None`` or raising a fresh ``error()``."""
    while waiters:
        task = next(iter(waiters))
        del waiters[task]
        if error is None:
            trio.lowlevel.reschedule(task)
        else:
            trio.lowlevel.reschedule(task, Error(error()))
