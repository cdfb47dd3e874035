"""The keeper of a ``ChildGroup``: a small process that spawns the group's children, is their
child subreaper, reaps every process that ends up its child, reports each exit status to the
owner, and stops every process below it when the owner dies, however the owner dies (ADR 0023).

It runs as ``python -I -S -c ...`` and imports only built-in and C modules of the standard
library (and ``tether._procfs``, which does too), so it starts in tens of milliseconds and
stays near the interpreter's own memory (``json``, ``socket`` and ``typing`` would add 2 MB).
It talks to its owner, which runs the same interpreter, over one Unix stream socket, in frames
of a 4-byte big-endian length and a ``marshal``-ed dict:

    keeper -> owner   {"op": "ready", "pid": N}
    owner  -> keeper  {"op": "spawn", "path": ..., "args": [...], "env": {...}, "fds": [...],
                       "group": "TETHER_GROUP=<id>"}
                      (with the descriptors to pass, by SCM_RIGHTS, in ``fds`` order)
    keeper -> owner   {"op": "spawned", "pid": N} or {"op": "failed", "errno": E}
    owner  -> keeper  {"op": "ack", "pid": N}   (the owner holds N's identity: it may be reaped)
    keeper -> owner   {"op": "exit", "pid": N, "code": C}
    owner  -> keeper  {"op": "join", "group": G, "grace": S}
                      (G uses the keeper: stop it too, S apart, if the owner dies)
    owner  -> keeper  {"op": "release", "group": G}  (kill what is left of G)
    keeper -> owner   {"op": "released", "group": G, "killed": K}
    owner  -> keeper  {"op": "close"}           (stop what is left, reap, exit)

One keeper serves every ``ChildGroup`` of its owner (ADR 0037). A group's processes are its
children, the orphans that lead or sit in their sessions or carry the group's mark, and their
descendants; an orphan that is none of these (it left its session and scrubbed its
environment) is released with the last group that is open.

A spawned child is not reaped before its ``ack``, so its pid cannot be reused while the owner
builds its ``ProcessRef``. The owner is watched through a pidfd (never ``PR_SET_PDEATHSIG``,
which fires when the owner's *thread* that forked exits) and by the socket's end of file.

When it stops the group it stops every process below it and every process carrying the
group's mark (``TETHER_GROUP``) wherever it went, with their descendants: so a keeper started
to replace a killed one also stops the orphans its predecessor left (ADR 0031).
"""

from __future__ import annotations

import marshal
import os
import select
import sys

from . import _procfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    import socket
    from typing import Any
else:
    import _signal as signal  # without its enums: see tether._procfs
    import _socket as socket  # the C module under ``socket``, which imports ``enum``

_HEADER = 4
_FD = 4
"""Bytes of one descriptor in an ``SCM_RIGHTS`` message (a C ``int``)."""


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as one frame of the keeper's protocol: a 4-byte length, then ``marshal``
    (both ends run the same interpreter, so its format is theirs)."""
    body = marshal.dumps(message)
    return len(body).to_bytes(_HEADER, "big") + body


def unframe(buffer: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The whole frames at the start of ``buffer``, and what is left of it."""
    frames = []
    while len(buffer) >= _HEADER:
        length = int.from_bytes(buffer[:_HEADER], "big")
        if len(buffer) < _HEADER + length:
            break
        frames.append(marshal.loads(buffer[_HEADER : _HEADER + length]))
        buffer = buffer[_HEADER + length :]
    return frames, buffer


_IGNORED = (
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGPIPE,
)
"""A keeper outlives terminal and group signals: it is the one that must stop the others."""


class Keeper:
    def __init__(self, sock: socket.socket, owner: int, grace: float, mark: str = "") -> None:
        self.sock = sock
        self.owner = owner
        self.grace = grace
        self.mark = mark
        """``VARIABLE=value``: the group's mark, stopped wherever it is (``""``: none)."""
        self.me = os.getpid()
        self.buffer = b""
        self.outgoing = bytearray()
        """Frames the owner has not taken yet: the socket is non-blocking, so a stopped owner
        never blocks the keeper (it must still see its owner die, and reap)."""
        self.fds: list[int] = []
        self.held: set[int] = set()
        """Spawned children not acknowledged yet: their zombies keep their pids."""
        self.spawned: set[int] = set()
        """Children the owner spawned and waits for."""
        self.groups: dict[str, set[int]] = {}
        """Each open group's mark to the pids of the children spawned for it (and so the
        sessions they lead)."""
        self.marks: set[str] = {mark} if mark else set()
        """The marks of the groups served and not released: stopped wherever they are when
        the owner dies."""

    def send(self, message: dict[str, Any]) -> None:
        self.outgoing += frame(message)
        self.flush()

    def flush(self) -> None:
        """Send what the socket takes now; keep the rest for its next ``POLLOUT``."""
        while self.outgoing:
            try:
                sent = self.sock.send(self.outgoing)
            except BlockingIOError:
                return
            except OSError:  # the owner is gone: its pidfd or the socket's end says so next
                self.outgoing.clear()
                return
            del self.outgoing[:sent]

    def receive(self) -> list[dict[str, Any]] | None:
        """The whole frames that arrived, or ``None`` once the owner's end is closed or broken
        (``ECONNRESET``: it died with frames of ours unread)."""
        try:
            data, ancillary, _, _ = self.sock.recvmsg(
                65536, socket.CMSG_SPACE(64 * 4), socket.MSG_CMSG_CLOEXEC
            )
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                whole = len(payload) - len(payload) % _FD
                self.fds.extend(
                    int.from_bytes(payload[at : at + _FD], sys.byteorder, signed=True)
                    for at in range(0, whole, _FD)
                )
        if not data:
            return None
        frames, self.buffer = unframe(self.buffer + data)
        return frames

    def spawn(self, request: dict[str, Any]) -> None:
        targets = [int(target) for target in request.get("fds") or []]
        passed, self.fds = self.fds[: len(targets)], self.fds[len(targets) :]
        pairs = zip(passed, targets, strict=False)  # a descriptor that did not come is skipped
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in pairs]
        try:
            # The owner's working directory, as a child of its own would have (posix_spawn has
            # no chdir; this process has one thread, and goes back to / at once).
            os.chdir(str(request.get("cwd") or "/"))
            pid = os.posix_spawn(
                str(request["path"]),
                [str(a) for a in request["args"]],
                {str(k): str(v) for k, v in request["env"].items()},
                setsid=True,
                setsigmask=(),
                setsigdef=_procfs.CATCHABLE,
                file_actions=actions,
            )
        except OSError as exc:
            self.send({"op": "failed", "errno": exc.errno or 5})
        else:
            self.held.add(pid)
            self.spawned.add(pid)
            group = str(request.get("group") or self.mark)
            if group:
                self.groups.setdefault(group, set()).add(pid)
                self.marks.add(group)
            self.send({"op": "spawned", "pid": pid})
        finally:
            os.chdir("/")
            for fd in passed:
                os.close(fd)

    def reap(self) -> None:
        for pid in _procfs.children(self.me):
            if pid in self.held:
                continue
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done and pid in self.spawned:
                self.spawned.discard(pid)
                self.send({"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    def stop_all(self, why: str) -> int:
        """Stop every process below this one and every one carrying the group's mark, with
        their descendants (SIGINT, SIGTERM, SIGKILL); reap them all; how many there were."""
        self.held.clear()

        def collect() -> set[_procfs.Identity]:
            procs = _procfs.table()
            pids = _procfs.descendants([self.me], procs)
            marked = _procfs.marked_any(self.marks) - {self.me, self.owner}
            return _procfs.identities(pids | marked | _procfs.descendants(marked, procs))

        found = collect()
        if found:
            try:  # noqa: SIM105 - ``contextlib`` would cost the keeper its import
                print(
                    f"tether keeper {self.me}: {why}; stopping {len(found)} processes",
                    file=sys.stderr,
                    flush=True,
                )
            except (OSError, ValueError):
                pass  # a pipe nobody reads any more
        steps = ((signal.SIGINT, self.grace), (signal.SIGTERM, self.grace), (signal.SIGKILL, 1.0))
        _procfs.escalate(collect, steps, self.reap)
        self.reap()
        return len(found)

    def release(self, group: str) -> int:
        """Kill what is left of ``group`` (its owner stopped it gently first), reap it, and
        forget the group; how many processes there were."""
        sessions = self.groups.pop(group, set())
        self.marks.discard(group)  # its processes are gone: no more scans for them
        others = set().union(*self.groups.values())  # a pid reused by another group is its

        def collect() -> set[_procfs.Identity]:
            procs = _procfs.table()
            roots = _procfs.marked_any([group]) - {self.me, self.owner}
            for pid in _procfs.children(self.me):
                fields = _procfs.stat_fields(pid)
                session = int(fields[3]) if fields else 0
                if not self.groups or ({pid, session} & sessions and not {pid, session} & others):
                    roots.add(pid)
            return _procfs.identities(roots | _procfs.descendants(roots, procs))

        self.held -= sessions
        found = collect()
        _procfs.escalate(collect, ((signal.SIGKILL, 1.0),), self.reap)
        self.reap()
        return len(found)

    def run(self) -> None:
        """Serve the owner until it dies or closes the group; whatever ends this (the owner's
        death, its socket's end or error, SIGTERM, a bug here), the tree is stopped first."""
        try:
            why = self.serve()
        except BaseException as exc:
            self.stop_all(f"the keeper failed ({type(exc).__name__}: {exc})")
            raise
        self.stop_all(why)

    def serve(self) -> str:
        """Serve the owner's requests; why it stopped."""
        try:
            owner_fd = os.pidfd_open(self.owner)
        except OSError:
            return "its owner was gone before it started"
        if os.getppid() != self.owner:  # the owner died before the pidfd was open
            return f"owner pid {self.owner} is gone"
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)
        self.sock.setblocking(False)
        self.send({"op": "ready", "pid": self.me})
        sock = self.sock.fileno()
        poll = select.poll()
        for fd in (sock, owner_fd, wake_r):
            poll.register(fd, select.POLLIN)
        while True:
            poll.modify(sock, select.POLLIN | (select.POLLOUT if self.outgoing else 0))
            try:
                ready = dict(poll.poll())
            except InterruptedError:
                continue
            if owner_fd in ready:  # first: nothing the socket holds matters once it is dead
                return f"owner pid {self.owner} died"
            if wake_r in ready:
                woken = os.read(wake_r, 512)
                self.reap()
                if signal.SIGTERM.to_bytes(1, "little") in woken:
                    return "it was sent SIGTERM"
            events = ready.get(sock, 0)
            if events & select.POLLOUT:
                self.flush()
            if events & ~select.POLLOUT:
                frames = self.receive()
                if frames is None:
                    return f"owner pid {self.owner} closed its end"
                for frame in frames:
                    op = frame.get("op")
                    if op == "spawn":
                        self.spawn(frame)
                    elif op == "ack":
                        self.held.discard(int(frame["pid"]))
                        self.reap()
                    elif op == "join":
                        group = str(frame.get("group") or "")
                        self.groups.setdefault(group, set())
                        self.marks.add(group)
                        self.grace = max(self.grace, float(frame.get("grace") or 0.0))
                    elif op == "release":
                        group = str(frame.get("group") or "")
                        killed = self.release(group)
                        self.send({"op": "released", "group": group, "killed": killed})
                    elif op == "close":
                        return "its owner closed it"


def main(argv: list[str]) -> None:
    """``main([socket fd, owner pid, grace, mark])`` (``mark``, ``VARIABLE=value``, may be
    left out)."""
    sock_fd, owner, grace = int(argv[0]), int(argv[1]), float(argv[2])
    mark = argv[3] if len(argv) > 3 else ""
    # What the owner left inheritable is not the children's: they get 0-2 and what is passed.
    os.closerange(3, sock_fd)
    os.closerange(sock_fd + 1, 1 << 20)
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    os.set_inheritable(sock_fd, False)
    sock = socket.socket(fileno=sock_fd)
    _procfs.prctl(_procfs.PR_SET_CHILD_SUBREAPER, 1)
    os.chdir("/")
    Keeper(sock, owner, grace, mark).run()
