"""``Harnesses``: a harness's life from spawn to reaped, and what it leaves behind.

Spawn (in its turn), watch for the exit and reap it, retire (stop the tree, sweep, record),
supersede (tell it, give it its own exit bound, then retire), and make a refused or stale
harness exit. Every stop uses ``stop_tree``'s escalation; every sweep touches only processes
marked with the session, the epoch, this host and this store.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from functools import partial

import attrs
import psutil
import trio

from .._util import Throttle
from ..process import (
    Child,
    SpawnError,
    find_twins,
    reap,
    start,
    stop_tree,
    stop_trees,
    wait_gone,
)
from ..process._table import STORE_VAR
from ..wire import Superseded
from ._awake import AwakeClock
from ._events import EventKind
from ._guard import Tasks
from ._model import Harness, Session
from ._outcomes import Attached, How, StartFailed
from ._records import Records
from ._registry import Sessions
from ._settings import Settings
from ._state import SessionState

logger = logging.getLogger("tether.agentd")


@attrs.define(eq=False)
class Harnesses:
    """Starts, watches, retires and sweeps the harnesses of every session."""

    settings: Settings
    sessions: Sessions
    records: Records
    tasks: Tasks
    clock: AwakeClock
    host: str | None
    store_id: str | None = attrs.field(default=None, init=False)
    """Set when the daemon starts: marks every harness and bounds every sweep."""
    _spawning: trio.CapacityLimiter = attrs.field(
        init=False,
        default=attrs.Factory(
            lambda self: trio.CapacityLimiter(self.settings.spawn_limit), takes_self=True
        ),
    )
    _throttle: Throttle = attrs.field(factory=lambda: Throttle(logger), init=False)

    async def spawn(self, session: Session, how: How, epoch: int) -> Attached:
        """Start a harness of ``epoch`` for ``session`` when a spawn's turn comes, and wait
        ``start_timeout`` (counted from then) for its hello.

        Raises:
            SpawnError: it cannot be started.
            StartFailed: it exited or stayed silent before saying hello; it was stopped.
        """
        async with self._spawning:
            return await self._spawn_now(session, how, epoch)

    async def _spawn_now(self, session: Session, how: How, epoch: int) -> Attached:
        directory = self.settings.session_dir(session.name)
        env = {
            **self.settings.env,
            "TETHER_SESSION": session.name,
            "TETHER_EPOCH": str(epoch),
            "TETHER_AGENTD": self.settings.socket_path,
            "TETHER_STATE_DIR": directory,
            "TETHER_GRACE": str(self.settings.grace),
        }
        if self.host is not None:
            env["TETHER_HOST"] = self.host
        if self.store_id is not None:
            env[STORE_VAR] = self.store_id
        try:
            child = await self._start(directory, env)
        except SpawnError as exc:
            self.sessions.emit(
                session, EventKind.SPAWN_FAILED, None, str(exc), epoch=epoch, reason=str(exc)
            )
            raise
        harness = Harness(child.ref, epoch, child, since=self.clock.now())
        session.harness = harness
        session.known = True
        session.become(SessionState.STARTING)
        self.tasks.start(self.watch_exit, session, harness, name=f"watch {session.name}")
        await self.records.save(session, harness, SessionState.STARTING)
        self.sessions.emit(session, EventKind(how), harness)
        with trio.move_on_after(self.settings.start_timeout):
            async with trio.open_nursery() as race:
                race.start_soon(_cancel_after, harness.hello, race.cancel_scope)
                race.start_soon(_cancel_after, harness.exited, race.cancel_scope)
        if harness.hello.is_set() and harness.alive:
            await self.records.save(session, harness, SessionState.ATTACHED)
            return Attached(session.name, harness.ref.pid, epoch, how)
        if not harness.alive:
            log = os.path.join(directory, "harness.log")
            last = await trio.to_thread.run_sync(_last_line, log)
            reason = (
                f"the harness exited with code {harness.code} before saying hello"
                + (f"; its log ends: {last}" if last else "")
                + f" (tether logs {session.name} shows it all)"
            )
        else:
            reason = f"the harness did not say hello within {self.settings.start_timeout:.1f}s"
        self.sessions.emit(session, EventKind.SPAWN_FAILED, harness, reason, reason=reason)
        await self.retire(session, harness, "no hello")
        raise StartFailed(session.name, reason, exited=not harness.alive)

    async def _start(self, directory: str, env: dict[str, str]) -> Child:
        """Start the harness program with its log as stdout and stderr.

        Raises:
            SpawnError: it cannot be executed, or its directory or log cannot be opened
                (a full disk, a descriptor limit).
        """
        argv = self.settings.harness_argv
        path = os.path.join(directory, "harness.log")
        try:
            os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)  # sessions/
            os.makedirs(directory, mode=0o700, exist_ok=True)
            log = _open_log(path)
        except OSError as exc:
            code = exc.errno or errno.EIO
            raise SpawnError(argv[0], code, f"cannot open {path}: {os.strerror(code)}") from exc
        try:
            return await start(argv, env=env, name="harness", grace=self.settings.grace, output=log)
        finally:
            os.close(log)

    def adopt(self, session: Session, harness: Harness) -> None:
        """Make a live harness found by identity (after a restart, or saying hello with the
        current epoch) the session's, and watch for its exit."""
        session.harness = harness
        self.tasks.start(self.watch_exit, session, harness, name=f"watch {session.name}")

    async def watch_exit(self, session: Session, harness: Harness) -> None:
        """Wait for the harness to exit (through its pidfd if ours, else by polling its
        identity), reap it, record the code and say so."""
        code: int | None
        if harness.child is not None:
            code = await harness.child.wait()
        else:
            await wait_gone({harness.ref}, cap=self.settings.heartbeat)
            code = reap(harness.ref)
        harness.exit(code)
        await harness.drop_link()
        if session.harness is harness and not harness.retired:
            session.become(SessionState.DEAD)
            with trio.CancelScope(shield=True):
                await self.records.save(session, harness, SessionState.DEAD, keep_pid=False)
                await self.sweep(session, harness.epoch)
        shown = "unknown (not our child)" if code is None else str(code)
        self.sessions.emit(session, EventKind.EXITED, harness, f"code {shown}", code=code)

    async def sweep(self, session: Session, epoch: int) -> None:
        """Stop what a dead harness left behind: processes still marked with its epoch, its
        host and this store (another daemon's harness of the same name is not ours). Nothing
        is swept while a live harness of that epoch is the session's (it came back: its
        tree is its own)."""
        current = session.harness
        alive = current is not None and current.epoch == epoch and not current.retired
        if alive and current is not None and current.ref.is_alive():
            return
        try:
            # Every process's environment is read: in a worker thread, so thousands of them
            # never stop the daemon answering.
            found = await trio.to_thread.run_sync(
                partial(find_twins, session.name, epoch=epoch, host=self.host, store=self.store_id)
            )
            left = set(found)
        except OSError as exc:  # EMFILE and friends: logged, never fatal
            self._throttle.warn("sweep", "session %s: cannot sweep now: %s", session.name, exc)
            return
        if left:
            logger.warning(
                "session %s: stopping %d processes left by epoch %d",
                session.name,
                len(left),
                epoch,
            )
            await stop_trees(left, self.settings.grace)

    async def retire(self, session: Session, harness: Harness, why: str) -> None:
        """Stop the harness's tree and reap it; idempotent, and every caller waits for it."""
        if harness.retiring is not None:
            await harness.retiring.wait()
            return
        harness.retiring = trio.Event()
        with trio.CancelScope(shield=True):
            await harness.drop_link()
            if harness.alive:
                logger.info(
                    "session %s: stopping harness pid %d (%s)", session.name, harness.ref.pid, why
                )
                survivors = await stop_tree(harness.ref, self.settings.grace)
                for survivor in survivors:
                    logger.error("session %s: %s survived", session.name, survivor.describe())
                with trio.move_on_after(1.0):
                    await harness.exited.wait()
            await self.sweep(session, harness.epoch)
            if session.harness is harness:
                session.become(SessionState.DEAD)
                await self.records.save(session, harness, SessionState.DEAD, keep_pid=False)
            harness.retiring.set()

    async def supersede(
        self, session: Session, harness: Harness, current: int | None, *, reason: str = ""
    ) -> None:
        """Tell a harness of an older epoch it is superseded (and why, if not a plain newer
        epoch: it seals its open calls with it), give it its own exit bound to exit cleanly,
        then retire it."""
        link = harness.link
        if link is not None:
            await link.send(Superseded(session.name, harness.epoch, current or 0, reason))
        detail = f"current epoch is {current}" + (f"; {reason}" if reason else "")
        self.sessions.emit(session, EventKind.SUPERSEDED, harness, detail)
        with trio.move_on_after(self.settings.exit_bound):
            await harness.exited.wait()
        await self.retire(session, harness, "superseded")

    async def confirm_exit(self, session: Session, stale: Harness) -> None:
        """A superseded harness must exit within its bound; if not, its tree is stopped (never
        this process's own tree: a peer that is our ancestor is only told)."""
        if _is_self_or_ancestor(stale.ref.pid):
            logger.warning(
                "session %s: pid %d is this daemon or its ancestor; not stopping it",
                session.name,
                stale.ref.pid,
            )
            return
        bound = self.settings.exit_bound
        with trio.move_on_after(bound):
            await wait_gone({stale.ref})
        if stale.ref.is_alive():
            self.sessions.emit(
                session, EventKind.SUPERSEDED, stale, f"still alive after {bound:.1f}s; stopping it"
            )
            await stop_tree(stale.ref, self.settings.grace)
        if session.harness is not None and session.harness.ref == stale.ref:
            return  # its own watcher reports the exit
        code = reap(stale.ref)
        shown = "unknown (not our child)" if code is None else str(code)
        self.sessions.emit(session, EventKind.EXITED, stale, f"code {shown}", code=code)


def _is_self_or_ancestor(pid: int) -> bool:
    ancestor: int | None = os.getpid()
    while ancestor:
        if ancestor == pid:
            return True
        try:
            ancestor = psutil.Process(ancestor).ppid()
        except psutil.Error:
            return False
    return False


async def _cancel_after(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _open_log(path: str) -> int:
    """The session's log, opened to append: a regular file, never a symlink (it could point
    anywhere), a FIFO (opening it would block the daemon) or a device, all of which any tool
    the agent runs could put in its place. Such a thing is removed and a new log made."""
    try:
        fd = os.open(path, _LOG_FLAGS | os.O_CREAT, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO with no reader
            raise
        fd = -1
    if fd >= 0 and stat.S_ISREG(os.fstat(fd).st_mode):
        os.set_blocking(fd, True)
        return fd
    if fd >= 0:
        os.close(fd)
    logger.warning("%s is not a regular file; replacing it with a new log", path)
    os.unlink(path)
    fd = os.open(path, _LOG_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
    os.set_blocking(fd, True)
    return fd


def _last_line(path: str, tail: int = 4096) -> str:
    """The last line of the log that is not blank (its cause, in a traceback), cut to 200
    characters; ``""`` if it cannot be read. Only a regular file is read, and only its last
    ``tail`` bytes: a tool may have put a symlink to ``/dev/urandom`` or a FIFO in its place,
    which a plain read would follow forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        data = os.pread(fd, tail, max(0, info.st_size - tail))
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").splitlines()
    text = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return text if len(text) <= 200 else text[:199] + "…"
