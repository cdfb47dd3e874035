"""``Keeper``: the owner's side of a ``ChildGroup``'s keeper process (``tether._keeper``).

The keeper is started with ``python -I -S`` and a socket, spawns the group's children on
request, and tells of each exit. If this process dies, however it dies, the keeper sees it
through a pidfd and stops everything below itself. ADR 0023 says why it is a process of its
own, and what it costs. Every round trip to it has a deadline (``KEEPER_TIMEOUT``): a keeper
that does not answer (SIGSTOPped, say) is killed, and the group starts another (ADR 0031).
"""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import _backend
from .._keeper import frame, unframe
from ._child import Child
from ._ref import ProcessRef
from ._spawn import DEFAULT_DISPOSITIONS, SpawnError, strays

logger = logging.getLogger("tether.process")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The directory that holds the ``tether`` package (the keeper runs without site-packages)."""
_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from tether._keeper import main; "
    "main(sys.argv[2:])"
)
START_TIMEOUT = 10.0
"""Seconds a keeper has to say it is ready."""
KEEPER_TIMEOUT = 5.0
"""Seconds a keeper has to take a request and answer it; past them it is unresponsive."""


class KeeperUnavailable(RuntimeError):
    """The keeper could not be started, or is gone."""


class KeeperUnresponsive(SpawnError):
    """The group's keeper failed a spawn: it did not answer within its deadline (it was
    stopped, say: it is killed) or it died before it answered. The group goes on with
    another keeper; whether the program started is not known (if it did, it carries the
    group's mark and is stopped with the group)."""

    def __init__(self, program: str, keeper: int, detail: str) -> None:
        super().__init__(program, errno.ETIMEDOUT, f"the group's keeper (pid {keeper}) {detail}")
        self.keeper = keeper
        """The keeper's pid."""


class Keeper:
    """One running keeper: ``spawn`` through it; ``serve`` reads what it says (run it in the
    group's nursery); ``close`` stops what is left below it and waits for it to exit."""

    def __init__(
        self,
        process: Child,
        sock: socket.socket,
        grace: float,
        timeout: float = KEEPER_TIMEOUT,
    ) -> None:
        self.process = process
        self.grace = grace
        self.timeout = timeout
        self._sock = sock
        self._buffer = b""
        self._lock = _backend.lock()
        self._reply: dict[str, Any] | None = None
        self._replied = _backend.event()
        self._watched: dict[int, Child] = {}
        self.alive = True
        self.on_lost: Callable[[], None] = lambda: None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls, grace: float, mark: str = "") -> Keeper:
        """Start a keeper for this process; ``mark`` (``VARIABLE=value``) names the group's
        processes it stops wherever they are, besides those below it.

        Raises:
            KeeperUnavailable: it could not be started or did not say it was ready.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [
            sys.executable, "-I", "-S", "-c", _CODE, _ROOT, "3", str(os.getpid()), repr(grace),
            mark,
        ]  # fmt: skip
        try:
            pid = _spawn(argv, theirs.fileno())
        except OSError as exc:
            ours.close()
            raise KeeperUnavailable(f"cannot start a keeper: {exc}") from exc
        finally:
            theirs.close()
        child = Child._create(ProcessRef.of(pid), argv, "keeper", grace)
        ours.setblocking(False)
        keeper = cls(child, ours, grace)
        ready = False
        try:
            with _backend.move_on_after(START_TIMEOUT):
                frames = await keeper._read()
                ready = frames is not None and frames[0].get("op") == "ready"
        finally:
            if not ready:  # silent, or cancelled while it starts (its run ends, say)
                with _backend.cancel_scope(shield=True):
                    await keeper.kill()
                keeper._close_socket()
        if not ready:
            raise KeeperUnavailable(f"the keeper (pid {pid}) did not start within {START_TIMEOUT}s")
        return keeper

    async def serve(self) -> None:
        """Read the keeper's messages until it is gone; then run ``on_lost`` (unless closed)."""
        try:
            while True:
                frames = await self._read()
                if frames is None:
                    break
                for frame in frames:
                    self._dispatch(frame)
        finally:
            self.alive = False
            self._reply = None
            self._replied.set()
            self.on_lost()

    def _dispatch(self, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == "exit":
            child = self._watched.pop(int(frame["pid"]), None)
            if child is not None:
                child._reaped(int(frame["code"]))  # unless the kernel told it first
        elif op in ("spawned", "failed", "released"):
            self._reply = frame
            self._replied.set()

    async def spawn(
        self, program: str, path: str, args: Sequence[str], env: Mapping[str, str],
        fds: Mapping[int, int] | None = None, group: str = "",
    ) -> ProcessRef:  # fmt: skip
        """Have the keeper start ``path`` with ``args`` and ``env`` (descriptors ``fds``,
        target to ours, set up in the child) for ``group`` (its mark); its identity. ``watch``
        and ``ack`` it next.

        Raises:
            KeeperUnresponsive: the keeper did not answer within ``timeout`` (it was killed),
                or died before it answered.
            SpawnError: the keeper could not start it, or was gone before it was asked
                (``ECHILD``: nothing was started).
        """
        targets = list((fds or {}).keys())
        sources = [(fds or {})[t] for t in targets]
        message: dict[str, Any] = {
            "op": "spawn", "path": path, "args": list(args), "env": dict(env), "fds": targets,
            "group": group, "cwd": _cwd(),
        }  # fmt: skip
        if not self.alive:
            raise SpawnError(program, errno.ECHILD, "the group's keeper is gone")
        try:
            reply = await self._ask(message, sources, "a spawn")
        except TimeoutError:
            raise KeeperUnresponsive(
                program, self.pid, f"did not answer in {self.timeout:g}s"
            ) from None
        if reply is None:
            raise KeeperUnresponsive(program, self.pid, "died before it answered")
        if reply["op"] == "failed":
            raise SpawnError(program, int(reply["errno"]))
        return ProcessRef.of(int(reply["pid"]))  # the keeper holds its zombie until our ack

    async def join(self, group: str, grace: float) -> None:
        """Tell the keeper ``group`` uses it: if this process dies, the group's processes are
        stopped wherever they went (the orphans of a keeper killed before it, say), with the
        longest ``grace`` of its groups."""
        self.grace = max(self.grace, grace)
        with _backend.move_on_after(self.timeout), contextlib.suppress(OSError):
            await self._send({"op": "join", "group": group, "grace": grace}, [])

    async def release(self, group: str) -> int | None:
        """Have the keeper kill what is left of ``group`` (stopped gently by its owner before)
        and forget it; how many processes it killed, ``None`` if it is gone or did not answer
        (then it is killed: its successor stops the group's processes by their mark)."""
        if not self.alive:
            return None
        try:
            reply = await self._ask({"op": "release", "group": group}, [], "a release")
        except (TimeoutError, OSError):
            return None
        return None if reply is None else int(reply.get("killed", 0))

    async def _ask(
        self, message: dict[str, Any], fds: list[int], what: str
    ) -> dict[str, Any] | None:
        """Send ``message`` and wait for the reply (``None``: the keeper died first).

        Raises:
            TimeoutError: no reply within ``timeout``: the keeper is killed.
        """
        async with self._lock:
            self._replied = _backend.event()
            with _backend.move_on_after(self.timeout) as deadline:
                await self._send(message, fds)
                await self._replied.wait()
            if deadline.cancelled_caught:
                self.unresponsive(f"it did not answer {what} within {self.timeout:g}s")
                raise TimeoutError(what)
            reply, self._reply = self._reply, None
        return reply

    def watch(self, child: Child) -> None:
        """Route the keeper's report of ``child``'s exit to it."""
        self._watched[child.pid] = child

    async def ack(self, pid: int) -> None:
        """Tell the keeper ``pid``'s identity is known: it may reap it from now on. A keeper
        that does not take it within ``timeout`` is unresponsive (killed)."""
        with _backend.move_on_after(self.timeout) as deadline:
            try:
                await self._send({"op": "ack", "pid": pid}, [])
            except OSError:
                return  # it is gone: its reader says so
        if deadline.cancelled_caught:
            self.unresponsive(f"it did not take an ack within {self.timeout:g}s")

    def unresponsive(self, why: str) -> None:
        """The keeper does not answer (stopped, say): kill it, so the group goes on without
        it (its reader ends, ``on_lost`` runs; statuses come from the kernel)."""
        if not self.alive:
            return
        logger.error("keeper pid %d is unresponsive (%s): killing it", self.pid, why)
        self.process.send_signal(signal.SIGKILL)

    def unreported(self) -> list[Child]:
        """The children whose exit the keeper has not reported."""
        return [child for child in self._watched.values() if not child.done]

    async def close(self) -> None:
        """Ask the keeper to stop whatever is left below it and exit; wait for it (bounded)."""
        bound = 2 * self.grace + 2.0
        running = not self.process.done  # its reader may have ended already (cancelled)
        if running and self.process.ref.state() in ("T", "t"):
            logger.error("keeper pid %d is stopped at its close: killing it", self.pid)
            self.process.send_signal(signal.SIGKILL)
        elif running:
            with _backend.move_on_after(self.timeout), contextlib.suppress(OSError):
                await self._send({"op": "close"}, [])
        with _backend.move_on_after(bound):
            await self.process.wait()
        if not self.process.done:
            logger.error("keeper pid %d did not exit within %.1fs; killing it", self.pid, bound)
            await self.kill()
        self._close_socket()

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        with _backend.move_on_after(5.0):
            await self.process.wait()

    async def _send(self, message: dict[str, Any], fds: list[int]) -> None:
        data = memoryview(frame(message))
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        await _backend.checkpoint_if_cancelled()
        while data:
            try:  # the descriptors go with the first byte
                sent = self._sock.sendmsg([data], ancillary) if ancillary else self._sock.send(data)
            except BlockingIOError:
                await _backend.wait_writable(self._sock)
                continue
            data, ancillary = data[sent:], []
        await _backend.cancel_shielded_checkpoint()

    async def _read(self) -> list[dict[str, Any]] | None:
        """The next whole frames (at least one), or ``None`` at end of file."""
        while True:
            frames, self._buffer = unframe(self._buffer)
            if frames:
                await _backend.checkpoint()
                return frames
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                try:
                    await _backend.wait_readable(self._sock)
                except _backend.closed_errors():
                    return None
                continue
            except OSError:
                data = b""
            if not data:
                await _backend.checkpoint()
                return None
            self._buffer += data

    def _close_socket(self) -> None:
        if self._sock.fileno() >= 0:
            _backend.notify_closing(self._sock.fileno())
        self._sock.close()


def _spawn(argv: list[str], sock: int) -> int:
    """Start the keeper in a session of its own (no terminal signal reaches it), with a clean
    signal state and its end of the socket as descriptor 3."""
    return os.posix_spawn(
        sys.executable,
        argv,
        dict(os.environ),
        setsid=True,
        setsigmask=(),
        setsigdef=DEFAULT_DISPOSITIONS,
        file_actions=[(os.POSIX_SPAWN_DUP2, sock, 3), *strays({3})],
    )


def _cwd() -> str | None:
    """This process's working directory, for the keeper to start a child in (``None``, and
    so ``/``, if it was deleted)."""
    try:
        return os.getcwd()
    except OSError:
        return None
