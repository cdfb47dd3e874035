"""Small helpers for tests that use real processes."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tether.process._table import marks

# A three-level tree with every way of escaping: writes "ready" to argv[1] once all 5 sleepers run.
TREE = """
    import os, signal, subprocess, sys
    subprocess.Popen(["sleep", "1000"])                       # a plain child
    subprocess.Popen(["setsid", "sleep", "1001"])             # a setsid grandchild
    subprocess.Popen(["nohup", "sleep", "1002"],              # a nohup sleeper
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.Popen([sys.executable, "-c",                   # a level-2 child with its own
        "import signal, subprocess; subprocess.Popen(['sleep', '1004']); signal.pause()"])
    if os.fork() == 0:                                        # a double-forked daemon
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "1003"])
        os._exit(0)
    os.wait()
    open(sys.argv[1], "w").write("ready")
    signal.pause()                                            # until a signal ends it
"""


# A child that, on SIGINT, writes argv[2] to the file argv[1] and exits 0; it writes
# argv[1] + ".ready" once its handler is in place.
SIGINT_REPORTER = """
    import signal, sys
    def bye(*_):
        open(sys.argv[1], "w").write(sys.argv[2])
        sys.exit(0)
    signal.signal(signal.SIGINT, bye)
    open(sys.argv[1] + ".ready", "w").close()
    signal.pause()
"""

KILLER_SCRIPT = 'kill -"$0" "$1"; read _'


def lingering_killer(signal_name: str, pid: int) -> subprocess.Popen[str]:
    """A process that sends ``signal_name`` to ``pid`` and then stays alive until its stdin
    closes, so the receiver can still read its command line (a sender that has exited and been
    reaped leaves nothing in /proc: an honest limit, not what these tests are about)."""
    return subprocess.Popen(
        ["sh", "-c", KILLER_SCRIPT, signal_name, str(pid)], stdin=subprocess.PIPE, text=True
    )


def killer_argv(signal_name: str, pid: int) -> list[str]:
    """The command line ``lingering_killer`` runs."""
    return ["sh", "-c", KILLER_SCRIPT, signal_name, str(pid)]


def python(code: str, *args: str) -> list[str]:
    """argv that runs ``code`` (dedented) in a fresh interpreter with ``args``."""
    return [sys.executable, "-c", textwrap.dedent(code), *args]


# A harness that says hello, leaves N ``setsid`` sleepers marked with its session (argv[1]),
# touches argv[2] and exits 0: what a fork loop or a leaky test runner leaves a daemon.
LEAVER = r"""
import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_AGENTD"])
body = json.dumps({"type": "hello", "session": os.environ["TETHER_SESSION"],
                   "epoch": int(os.environ["TETHER_EPOCH"]), "pid": os.getpid(),
                   "create_time": 0.0}).encode()
s.sendall(struct.pack(">I", len(body)) + body)
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", "600"])
open(sys.argv[2], "w").close()
os._exit(0)
"""


QUICK_HARNESS = """
from tether import run_harness

async def engine(commands, ctx):
    async for command in commands:  # each prompt is recorded as it is taken; nothing more
        pass

raise SystemExit(run_harness(engine))
"""
"""A harness whose engine takes every prompt at once: delivery with no turn to wait for."""


def harness_env(
    session: str, epoch: int, agentd: Path, state: Path, **extra: str
) -> dict[str, str]:
    """This process's environment plus what agentd gives a harness it starts."""
    return {
        **os.environ,
        "TETHER_SESSION": session,
        "TETHER_EPOCH": str(epoch),
        "TETHER_AGENTD": str(agentd),
        "TETHER_STATE_DIR": str(state),
        **extra,
    }


def third_party(module: str, extra: str) -> None:
    """At a test module's top: skip it without ``module`` (``pip install 'tether[extra]'``),
    unless ``TETHER_REQUIRE_THIRD_PARTY`` (CI) says the third-party tests must run: then a
    missing ``module`` fails it."""
    if not os.environ.get("TETHER_REQUIRE_THIRD_PARTY"):
        pytest.importorskip(module, reason=f"{module} comes with the {extra} extra")
        return
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed (pip install 'tether[{extra}]'), and"
            " TETHER_REQUIRE_THIRD_PARTY says the third-party tests must run"
        ) from exc


def unique_session() -> str:
    """A session id no other test or process uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


async def wait_until(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Poll ``predicate`` until it holds, on either loop; fail after ``timeout`` seconds (the
    loop's time)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def ours() -> list[psutil.Process]:
    """This test process's descendants: what the suite started. The suite is a subreaper
    (conftest), so a process that escaped a test by a double fork or ``setsid`` is here too,
    and a process some other program on the machine started never is."""
    return psutil.Process().children(recursive=True)


def alive(process: psutil.Process) -> bool:
    """Whether ``process`` still runs (a zombie does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sleepers(durations: Collection[str]) -> list[psutil.Process]:
    """The suite's own ``sleep N`` processes, for each N in ``durations`` (never another test
    worker's or a user's)."""
    found = []
    for process in ours():
        try:
            cmdline = process.cmdline()
        except psutil.Error:
            continue
        if len(cmdline) == 2 and cmdline[0].endswith("sleep") and cmdline[1] in durations:
            found.append(process)
    return found


def marked(session: str) -> list[psutil.Process]:
    """The suite's own processes whose environment carries ``TETHER_SESSION=session``.

    Read the way ``find_twins`` reads it, so a process caught inside ``execve`` is not missed;
    only descendants are looked at, so a user's harness of the same name is never touched.
    """
    found = []
    for process in ours():
        mark = marks(process.pid)
        if mark is not None and mark.session == session:
            found.append(process)
    return found


def count_named(session: str, name: str) -> int:
    """How many processes carrying the session's mark run ``name`` (vanishing ones skipped)."""
    count = 0
    for process in marked(session):
        try:
            count += process.name() == name
        except psutil.Error:
            continue
    return count


def kill_marked(session: str, looks: int = 50) -> None:
    """SIGKILL every process of the suite's carrying the session's mark: a failed test's
    clean-up, never reaching another program's harness of the same name (issue 43).

    Looked for again until a look finds none (at most ``looks`` times): a process forked
    between one look and its parent's kill inherits the mark and is caught by the next (the
    likeliest reading of a random-lives failure, not reproduced: its clean-up waited out its
    deadline and left a ``sleep 600`` for the suite to find)."""
    for _ in range(looks):
        found = marked(session)
        if not found:
            return
        for process in found:
            try:
                process.kill()
            except psutil.Error:
                continue
        time.sleep(0.005)  # the kills land before the next look


def zombie_children() -> list[psutil.Process]:
    """Zombies whose parent is this process."""
    return [p for p in psutil.Process(os.getpid()).children() if _status(p) == psutil.STATUS_ZOMBIE]


def _status(process: psutil.Process) -> str | None:
    try:
        return str(process.status())
    except psutil.Error:
        return None


def descendants() -> set[int]:
    """The pids of this process's descendants now (a clean-up's ``before``)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def new_descendants(before: set[int]) -> list[psutil.Process]:
    """This process's descendants that were not there ``before``, zombies included."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]


def gone_since(before: set[int]) -> bool:
    """Kill every descendant started since ``before`` and reap those reparented here (the
    suite is a subreaper); whether none is left. A keeper or harness may exit, and be
    reparented here, only after its parent did: so this is polled, not done once."""
    for process in new_descendants(before):
        try:
            process.kill()
        except psutil.Error:
            continue
    reap_zombie_children()
    return new_descendants(before) == []


def settle_orphans(before: set[int], timeout: float = 10.0) -> None:
    """Reap, as init would, what the test's processes orphan here while they finish exiting
    (a keeper exits after its harness), for up to ``timeout`` seconds; kills nothing, so
    whatever is still alive after it is a leak for the guard to name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap_zombie_children()
        if not new_descendants(before):
            return
        time.sleep(0.02)


def reap_zombie_children() -> bool:
    """Reap this process's zombie children, as init would for orphans reparented to it (the
    suite is a subreaper); whether none is left."""
    for zombie in zombie_children():
        try:
            os.waitpid(zombie.pid, os.WNOHANG)
        except ChildProcessError:
            continue
    return zombie_children() == []


def agentd_events(directory: Path, session: str | None = None) -> list[dict[str, Any]]:
    """The event log of the daemon whose state directory is ``directory``, across its restarts
    (they append to one file), as dicts; only ``session``'s if given."""
    path = directory / "agentd.events.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row for row in rows if session is None or row["session"] == session]


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real filesystem of ``size`` (tmpfs) at ``mount``, to fill up; skips the test where
    mounting is not allowed."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
