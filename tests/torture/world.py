"""The world the campaign tortures: a real ``tether agentd`` with the campaign's harness for a
few sessions, a few ``ChildGroup`` owners running tools, and the facts of what the nemesis
did to them (``Facts``), which the invariants read to tell a fault's effect from a bug."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import psutil
import trio

from tether.process._table import marks

HERE = Path(__file__).parent
MCP_SERVER = str(HERE.parent / "data" / "mcp_server.py")
"""The MCP server an owner's MCP rounds start (``owner.py``)."""
TETHER = [sys.executable, "-m", "tether"]
HEARTBEAT, GRACE, MISS_LIMIT = 0.2, 0.2, 3
PATIENCE = HEARTBEAT * MISS_LIMIT
RECONNECT_FOR = 8.0
"""Seconds a harness waits for a daemon that went away (the nemesis restarts it at once)."""
DAEMON_FDS = 512
"""The daemon's descriptor limit, so that a flood of connections can exhaust it."""
_STARTED = re.compile(r"session=(\S+) (?:spawned|respawned|adopted|attached) epoch=\d+ pid=(\d+)")
EXIT_CODES = {0, 65, 66, 69, 75, 78}
"""What a ``tether`` command may exit with: success, or a documented refusal."""


@attrs.define
class Facts:
    """What the nemesis did, by process (pid and start time), and when (monotonic)."""

    killed: dict[int, float] = attrs.Factory(dict)
    stops: dict[int, list[tuple[float, float]]] = attrs.Factory(dict)
    """Each stop of a process: from, until (``inf`` while it lasts)."""
    disk_full: list[tuple[float, float]] = attrs.Factory(list)
    daemon_down: list[tuple[float, float]] = attrs.Factory(list)
    """The daemon was killed (until its successor listened) or stopped."""
    daemon_killed: list[float] = attrs.Factory(list)
    tools: set[str] = attrs.Factory(set)
    """The tokens of the tools the nemesis signalled (read from their command lines)."""

    def daemon_killed_between(self, start: float, end: float) -> bool:
        return any(start <= at <= end for at in self.daemon_killed)

    def stopped_for(self, pid: int, since: float = 0.0) -> float:
        """The longest stop of ``pid`` that ended after ``since``."""
        now = time.monotonic()
        spans = [min(end, now) - start for start, end in self.stops.get(pid, []) if end > since]
        return max(spans, default=0.0)

    def stopped_now(self, pid: int) -> bool:
        return any(end == float("inf") for _, end in self.stops.get(pid, []))

    def resumed_at(self, pid: int) -> float:
        """When ``pid``'s last stop ended (0 if never stopped)."""
        return max((end for _, end in self.stops.get(pid, [])), default=0.0)

    def disk_was_full(self, within: float) -> bool:
        now = time.monotonic()
        return any(end > now - within for _, end in self.disk_full)


@attrs.define
class Owner:
    """One ``ChildGroup`` owner (``owner.py``) in its own directory."""

    process: subprocess.Popen[bytes]
    directory: Path
    seed: int
    loop: str = "trio"
    """The loop it runs on: ``trio`` or ``asyncio`` (every other owner)."""

    @property
    def session(self) -> str:
        return f"torture-owner-{self.seed}"

    @property
    def name(self) -> str:
        """How reports name it: ``owner 7 (asyncio)``."""
        return f"owner {self.seed} ({self.loop})"

    def keeper(self) -> int | None:
        try:
            text = (self.directory / "keeper").read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text else None

    def results(self) -> list[dict[str, object]]:
        return _lines(self.directory / "results.jsonl")


@attrs.define
class World:
    root: Path
    sessions: list[str]
    facts: Facts = attrs.Factory(Facts)
    daemon: subprocess.Popen[bytes] | None = None
    owners: dict[int, Owner] = attrs.Factory(dict)
    retired: list[Owner] = attrs.Factory(list)
    """Owners the nemesis killed, kept for their results."""
    copies: int = 0
    next_seed: int = 0
    spawned: set[int] = attrs.Factory(set)
    """Pids this process started and waits for itself (not orphans to reap)."""

    @property
    def socket(self) -> Path:
        return self.root / "agentd.sock"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def store(self) -> Path:
        return self.root / "epochs.sqlite3"

    def daemon_argv(self, socket: Path, store: Path, state: Path) -> list[str]:
        return [
            *TETHER, "agentd", "--socket", str(socket), "--store", str(store),
            "--state-dir", str(state), "--heartbeat", str(HEARTBEAT), "--grace", str(GRACE),
            "--miss-limit", str(MISS_LIMIT), "--restart-limit", "100000", "--restart-window",
            "1", "--backoff", "0", "--backoff-cap", "0", "--start-timeout", "20",
            "--", sys.executable, str(HERE / "harness.py"),
        ]  # fmt: skip

    def start_daemon(self) -> None:
        log = open(self.root / "agentd.log", "ab")  # noqa: SIM115 - the child holds it
        env = {**os.environ, "TETHER_RECONNECT_FOR": str(RECONNECT_FOR)}
        self.daemon = subprocess.Popen(
            self.daemon_argv(self.socket, self.store, self.state),
            stdout=log, stderr=log, env=env, preexec_fn=_limit_fds,
        )  # fmt: skip
        self.spawned.add(self.daemon.pid)
        log.close()

    def start_owner(self, slot: int) -> None:
        self.next_seed += 1
        directory = self.root / "owners" / f"{slot}-{self.next_seed}"
        directory.mkdir(parents=True)
        loop = "asyncio" if self.next_seed % 2 else "trio"
        process = subprocess.Popen(
            [sys.executable, str(HERE / "owner.py"), str(directory), str(self.next_seed), loop],
            stderr=subprocess.DEVNULL,
        )
        self.spawned.add(process.pid)
        self.owners[slot] = Owner(process, directory, self.next_seed, loop)

    async def tether(self, *args: str, bound: float) -> tuple[int, str, str] | None:
        """Run ``tether ARGS`` against the daemon: its exit code and output, or ``None`` if it
        did not end within ``bound`` seconds (it is killed)."""
        argv = [*TETHER, args[0], "--socket", str(self.socket), *args[1:]]
        process = await trio.lowlevel.open_process(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.spawned.add(process.pid)
        assert process.stdout is not None
        assert process.stderr is not None
        out, err = bytearray(), bytearray()

        async def read(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
            while chunk := await stream.receive_some():
                into += chunk

        try:
            with trio.move_on_after(bound):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read, process.stdout, out)
                    nursery.start_soon(read, process.stderr, err)
                code: int = await process.wait()
                return code, out.decode(), err.decode()
            return None
        finally:
            with trio.CancelScope(shield=True):
                process.kill()
                await process.wait()
                await process.stdout.aclose()
                await process.stderr.aclose()
            self.spawned.discard(process.pid)

    async def listening(self) -> None:
        """Wait until the daemon accepts connections (bounded)."""
        with trio.fail_after(30):
            while True:
                try:
                    stream = await trio.open_unix_socket(str(self.socket))
                except OSError:
                    await trio.sleep(0.02)
                    continue
                await stream.aclose()
                return

    def harness(self, session: str) -> int | None:
        """The pid of the session's live harness, if one runs."""
        for pid in self.harnesses(session):
            return pid
        return None

    def harnesses(self, session: str) -> list[int]:
        """The live harnesses of ``session`` (not a harness's own child caught between its
        fork and its exec, which looks just like it)."""
        found = []
        for process in _below(os.getpid()):
            try:
                if not _is_harness(process) or process.status() == psutil.STATUS_ZOMBIE:
                    continue
                parent = process.parent()
                if parent is not None and _is_harness(parent):
                    continue
            except psutil.Error:
                continue
            mark = marks(process.pid)
            if mark is not None and mark.session == session:
                found.append(process.pid)
        return found

    def started(self) -> dict[int, str]:
        """Every harness the daemons started or took back, by pid, from their log (the
        daemon's own word: a process is not taken for a harness by its look)."""
        found: dict[int, str] = {}
        try:
            text = (self.root / "agentd.log").read_text(errors="replace")
        except FileNotFoundError:
            return found
        for session, pid in _STARTED.findall(text):
            if session in self.sessions:
                found[int(pid)] = session
        return found

    def received(self, session: str) -> list[dict[str, object]]:
        return _lines(self.state / "sessions" / session / "torture.jsonl")


def keeper_of(pid: int) -> int | None:
    """The pid of a ``ChildGroup`` keeper among ``pid``'s children."""
    try:
        for child in psutil.Process(pid).children():
            if "tether._keeper" in " ".join(child.cmdline()):
                return int(child.pid)
    except psutil.Error:
        return None
    return None


def tools_of(pid: int) -> list[int]:
    """The tools (``sh``) and MCP servers (``owner.py``'s) below ``pid``."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for process in below:
        try:
            if process.name() == "sh" or MCP_SERVER in process.cmdline():
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


def _is_harness(process: psutil.Process) -> bool:
    return "harness.py" in " ".join(process.cmdline()[:2])


def _below(pid: int) -> Iterator[psutil.Process]:
    try:
        yield from psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return


def _lines(path: Path) -> list[dict[str, object]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # the line being written
    return rows


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DAEMON_FDS, DAEMON_FDS))
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
