"""Suite-wide guards: the signal state every test starts from, no test may leave a process
behind, and every JSONL file a test leaves in its ``tmp_path`` (transcripts, event logs) reads
as plain JSON lines to any reader."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from etcd_cluster import Cluster, require
from helpers import descendants, settle_orphans
from tether.process._proc import become_subreaper

RESET = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)
RESET_NOTE: list[str] = []
MADE_HOME: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Issue 30: the suite starts from the signal state of a terminal, whatever it inherited
    (``nohup`` and CI runners ignore SIGHUP, a shell's background job SIGINT, some runners
    block signals): the tests assert what tether does with a process's signals, and what a
    command inherits is passed on by design (``tether run``, ``ChildGroup``'s mask)."""
    for sig in RESET:
        if signal.getsignal(sig) == signal.SIG_IGN:
            handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, handler)
            RESET_NOTE.append(f"{signal.Signals(sig).name} was ignored")
    # Issue 40: the fault campaign's slice runs a fresh seed each time, drawn here so that
    # every xdist worker inherits the same one and the header shows it for a replay.
    os.environ.setdefault("TETHER_TORTURE_SEED", str(random.SystemRandom().randrange(1_000, 10**9)))
    # Issue 43: a daemon a test starts without naming its socket keeps its socket and state in
    # the suite's own directories, never in the user's runtime directory or ~/.local/state.
    if "TETHER_SUITE_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="tether-suite-")
        MADE_HOME.append(home)
        os.environ["TETHER_SUITE_HOME"] = home
        os.environ["XDG_STATE_HOME"] = os.path.join(home, "state")
        os.environ["XDG_RUNTIME_DIR"] = os.path.join(home, "run")
    blocked = signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if blocked:
        names = ", ".join(sorted(signal.Signals(s).name for s in blocked if s in signal.Signals))
        RESET_NOTE.append(f"blocked: {names}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``early`` go first: xdist hands out tests in this order, and one of
    tens of seconds started last keeps its worker busy after every other test has ended."""
    items.sort(key=lambda item: item.get_closest_marker("early") is None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for home in MADE_HOME:  # only the process that made it (xdist's workers inherit it)
        shutil.rmtree(home, ignore_errors=True)


def pytest_report_header() -> list[str]:
    seed = os.environ["TETHER_TORTURE_SEED"]
    signals = (
        f"tether: signals reset to a terminal's ({'; '.join(RESET_NOTE)})"
        if RESET_NOTE
        else "tether: signals as inherited from a terminal"
    )
    return [signals, f"tether: fault campaign slice seed {seed} (TETHER_TORTURE_SEED={seed})"]


def _descendants() -> list[psutil.Process]:
    return psutil.Process(os.getpid()).children(recursive=True)


def _describe(process: psutil.Process) -> str | None:
    try:
        return f"pid={process.pid} status={process.status()} cmd={process.cmdline()}"
    except psutil.Error:
        return None


FOREIGN_SESSIONS = ("s1", "s2")  # the names the README and the guide use


def _start_foreign(session: str) -> int:
    """A stand-in for a user's running harness of ``session``: a process carrying its mark,
    started by a double fork before this process becomes a subreaper, so it is *not* one of
    the suite's processes (issue 43: the suite once SIGKILLed a newcomer's own ``s1``)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the intermediate child
        os.close(read)
        os.setsid()
        env = {**os.environ, "TETHER_SESSION": session, "TETHER_EPOCH": "1"}
        grandchild = os.fork()
        if grandchild == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execvpe("sleep", ["sleep", "7200"], env)
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        return int(pipe.read())


@pytest.fixture(scope="session", autouse=True)
def foreign_agents_survive() -> Iterator[None]:
    """Fail the run if the suite touched a process it did not start: two foreign processes
    marked ``s1`` and ``s2`` must be alive, untouched, when the last test is done."""
    pids = {session: _start_foreign(session) for session in FOREIGN_SESSIONS}
    created = {session: psutil.Process(pid).create_time() for session, pid in pids.items()}
    yield
    killed = []
    for session, pid in pids.items():
        try:
            process = psutil.Process(pid)
            alive = process.create_time() == created[session] and process.status() not in (
                psutil.STATUS_ZOMBIE,
                psutil.STATUS_DEAD,
            )
            process.kill()
        except psutil.NoSuchProcess:
            alive = False
        if not alive:
            killed.append(session)
    if killed:
        pytest.fail(f"the suite killed a foreign agent it did not start: {', '.join(killed)}")


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(foreign_agents_survive: None) -> Iterator[None]:
    """Fail the run if any process started during it outlives it, zombies included.

    The test process becomes a child subreaper first, so a process that escapes a test (a
    double fork, a harness killed before it could reap its tree) is reparented here, where
    this check sees it, instead of to init, where it would not.
    """
    become_subreaper()
    before = {p.pid for p in _descendants()}
    yield
    started = [p for p in _descendants() if p.pid not in before]
    zombies = [p for p in started if _describe(p) and p.status() == psutil.STATUS_ZOMBIE]
    # Give children that are already exiting a bounded moment to be reaped by their owners.
    _, alive = psutil.wait_procs([p for p in started if p not in zombies], timeout=5.0)
    described = [d for p in [*zombies, *alive] if (d := _describe(p))]
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs([*zombies, *alive], timeout=5.0)
    if described:
        pytest.fail("processes left behind by the suite:\n" + "\n".join(described))


@pytest.fixture
def orphans_settled(no_process_leaks: None) -> Iterator[None]:
    """A harness SIGKILLed by a test orphans its keeper here, which exits a moment later:
    reaped (not killed) before the leak guard looks, so only what stays alive is a leak."""
    before = descendants()
    yield
    settle_orphans(before)


@pytest.fixture(autouse=True)
def jsonl_stays_plain(request: pytest.FixtureRequest) -> Iterator[None]:
    """Issue 28: after each test that has a ``tmp_path``, read every ``*.jsonl`` under it as
    ``jq`` or a log shipper would, line by line: no NUL byte, and every line JSON but a torn
    last one (a writer killed mid-line). A test that damages files on purpose says so with
    ``@pytest.mark.damages_jsonl``."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("damages_jsonl"):
        yield
        return
    root: Path = request.getfixturevalue("tmp_path")  # now: it is torn down after this
    yield
    for path in root.rglob("*.jsonl"):
        try:
            data = path.read_bytes()
        except OSError:  # a FIFO, a directory named so, a file gone meanwhile: not ours
            continue
        where = f"{path.relative_to(root)}"
        nul = data.find(b"\0")
        assert nul < 0, f"{where}: a NUL byte at {nul}"
        lines = data.split(b"\n")
        lines.pop()  # after the last newline: empty, or a torn line
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except ValueError:
                pytest.fail(f"{where}: line {number} is not JSON: {line[:80]!r}")


@pytest.fixture(scope="session")
def etcd_cluster(
    tmp_path_factory: pytest.TempPathFactory, no_process_left_behind: None
) -> Iterator[Cluster]:
    """One three-member etcd cluster on loopback for the whole run (started on first use,
    stopped by pid at the end); tests keep apart by key prefix. It asks for the leak check so
    that it is stopped before that check looks (pytest 8.0 with xdist tore it down after)."""
    cluster = Cluster(require(), tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_etcd_cluster(tmp_path: Path, no_process_leaks: None) -> Iterator[Cluster]:
    """A three-member cluster of the test's own, for tests that kill members; stopped before
    the leak guard looks (members the test restarted are not leaks)."""
    cluster = Cluster(require(), tmp_path / "etcd")
    cluster.directory.mkdir()
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def agentd_dir(tmp_path: Path) -> Iterator[Path]:
    """A daemon's state directory (mode 0700, as agentd wants); every process a session of its
    event log started is killed at the end, whatever the test left."""
    from helpers import agentd_events, kill_marked

    tmp_path.chmod(0o700)
    yield tmp_path
    for row in agentd_events(tmp_path):
        kill_marked(row["session"])
