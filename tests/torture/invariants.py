"""What must hold after every step of the campaign, whatever the nemesis did. Each check
returns the violations it found, as ``(invariant, detail)``; the facts of ``world.facts``
tell which effects a fault explains (a killed tool's status is its signal, a harness the
nemesis stopped may be judged a phantom), and nothing else is excused."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable

import attrs
import psutil

from tether.journal import scan
from tether.journal._entries import Message, ToolCall, ToolResult
from tether.process._table import marks
from torture.world import EXIT_CODES, GRACE, PATIENCE, Owner, World

BOUND = 2 * GRACE + 1.0
"""A group's promise: its tree is gone this long after its owner dies."""
HEADROOM = 4.0
"""On top of each bound: a loaded 2-core machine (the bound itself is a benchmark's)."""
ZOMBIE_BOUND = 5.0
LITTER = "sleep 300"
"""What a campaign tool leaves behind when its order says ``escape`` or ``litter``."""
DAEMON_RSS = 250 * 2**20

Violation = tuple[str, str]


@attrs.define
class Doomed:
    """The processes of an owner the nemesis killed, due to be gone by a deadline."""

    owner: Owner
    killed: float
    tree: set[tuple[int, float]]
    """``(pid, create_time)`` of every process of its group when it was killed."""
    keepers: set[int]
    """Its keepers then: a stopped one acts once it is resumed."""


@attrs.define
class Watch:
    """What the checks remember between steps."""

    doomed: list[Doomed] = attrs.Factory(list)
    zombies: dict[tuple[int, float], float] = attrs.Factory(dict)
    """Zombies seen, by identity, and since when."""
    harnesses: dict[int, str] = attrs.Factory(dict)
    """Every harness pid seen, by its session."""
    dead: set[int] = attrs.Factory(set)
    """Harness pids whose death was already judged."""
    checked: dict[str, int] = attrs.Factory(dict)
    """How many rows of each source (a results file, the requests) were checked already."""
    counts: dict[str, int] = attrs.Factory(dict)
    """How many times each invariant was checked."""

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def new(self, source: str, rows: list[dict[str, object]]) -> list[dict[str, object]]:
        """The rows of ``source`` not checked yet (a source only ever grows)."""
        start = self.checked.get(source, 0)
        self.checked[source] = len(rows)
        return rows[start:]


def group_of(session: str, command: str | None = None) -> set[tuple[int, float]]:
    """Every live process below the campaign (a subreaper: what its world leaves comes here)
    carrying ``session``'s mark, running ``command`` if given. Only the campaign's own: a
    session of the same name elsewhere on the machine (a test, a user's harness) is not
    this world's."""
    found = set()
    for process in psutil.Process().children(recursive=True):
        mark = marks(process.pid)
        if mark is None or mark.session != session:
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if command is None or process.cmdline() == command.split():
                found.add((process.pid, process.create_time()))
        except psutil.Error:
            continue
    return found


def no_litter(world: World, watch: Watch) -> list[Violation]:
    """Once the work has ended, no process a session's tools left behind is alive: the
    ``setsid`` sleepers of ``escape`` and ``litter`` orders are stopped by the tool's group,
    or by the daemon's sweep if the harness died first."""
    found: list[Violation] = []
    for session in world.sessions:
        left = group_of(session, LITTER)
        watch.count("no_litter")
        if left:
            found.append(("no_litter", f"{session}: {len(left)} sleepers its tools left"
                          f" are alive, e.g. pid {min(left)[0]}"))  # fmt: skip
    return found


def _exists(ident: tuple[int, float]) -> bool:
    try:
        process = psutil.Process(ident[0])
        return bool(process.create_time() == ident[1] and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def no_survivor(world: World, watch: Watch) -> list[Violation]:
    """No process outlives its owner by more than the bound (counted from when the owner's
    keeper could run: a stopped keeper acts once it is resumed)."""
    found: list[Violation] = []
    now = time.monotonic()
    for doomed in list(watch.doomed):
        if not doomed.keepers:  # its keeper was killed, its successor not started yet
            watch.doomed.remove(doomed)
            watch.count("no_survivor: owner died between keepers (excused, ADR 0031)")
            continue
        resumed = [world.facts.resumed_at(keeper) for keeper in doomed.keepers]
        since = max([doomed.killed, *resumed])
        if any(world.facts.stopped_now(keeper) for keeper in doomed.keepers):
            continue
        left = {ident for ident in doomed.tree if _exists(ident)}
        if not left:
            watch.doomed.remove(doomed)
            watch.count("no_survivor", len(doomed.tree))
        elif now - since > BOUND + HEADROOM:
            watch.doomed.remove(doomed)
            found.append(("no_survivor", f"{doomed.owner.name}: {sorted(left)} alive"
                          f" {now - since:.1f}s after it was killed"))  # fmt: skip
    return found


def no_zombie(world: World, watch: Watch, mine: set[int]) -> list[Violation]:
    """No process stays a zombie for long, unless its parent is stopped (it cannot reap);
    orphans that came to the campaign (a subreaper) are reaped by it, as init would."""
    found: list[Violation] = []
    now = time.monotonic()
    seen = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                continue
            ident, parent = (process.pid, process.create_time()), process.ppid()
        except psutil.Error:
            continue
        if parent == os.getpid() and process.pid not in mine:
            with contextlib.suppress(ChildProcessError):  # an orphan: reaped as init would
                os.waitpid(process.pid, os.WNOHANG)
            continue
        seen.add(ident)
        first = watch.zombies.setdefault(ident, now)
        if world.facts.stopped_now(parent) or parent == os.getpid():
            watch.zombies[ident] = now
        elif now - first > ZOMBIE_BOUND:
            found.append(("no_zombie", f"pid {ident[0]} a zombie of {parent} for"
                          f" {now - first:.1f}s"))  # fmt: skip
    watch.zombies = {ident: t for ident, t in watch.zombies.items() if ident in seen}
    watch.count("no_zombie")  # scans of the whole tree
    return found


def honest_status(
    rows: Iterable[dict[str, object]], world: World, watch: Watch, where: str
) -> list[Violation]:
    """A tool's reported status is the one it exited with, its signal if the nemesis killed
    it, or lost, never a made-up one; and never success for a tool that failed."""
    found: list[Violation] = []
    for row in rows:
        if "got" not in row:
            continue
        watch.count("honest_status")
        got, expect = row["got"], row["expect"]
        if row.get("lost") or row.get("timed_out") or got == expect:
            continue
        if got == 0:
            found.append(("honest_status", f"{where}: {row['token']} exited {expect},"
                          " reported 0"))  # fmt: skip
        elif not (isinstance(got, int) and got < 0 and _signalled(world, str(row["token"]))):
            found.append(("honest_status", f"{where}: {row['token']} exited {expect},"
                          f" reported {got}"))  # fmt: skip
    return found


def released(rows: Iterable[dict[str, object]], watch: Watch, where: str) -> list[Violation]:
    """A group that closed while another shares its keeper stopped its own processes; an MCP
    client's context, left however its session ended, stopped its server's whole tree."""
    found: list[Violation] = []
    for row in rows:
        if "left" not in row:
            continue
        name = "mcp_ladder" if str(row["token"]).endswith("-mcp") else "released"
        watch.count(name)
        if row["left"]:
            found.append((name, f"{where}: {row['token']}'s group closed and left"
                          f" pid {row['left']} alive"))  # fmt: skip
    return found


def _signalled(world: World, token: str) -> bool:
    """Whether the nemesis signalled the tool that ran for ``token``."""
    return token in world.facts.tools


def healthy_harnesses(world: World, watch: Watch) -> list[Violation]:
    """No harness dies but one the nemesis killed or stopped (a stopped one may be judged a
    phantom), or one that met a full disk: the daemon never kills a healthy harness."""
    found: list[Violation] = []
    for pid, session in world.started().items():
        watch.harnesses.setdefault(pid, session)
    for pid, session in watch.harnesses.items():
        if pid in watch.dead or _running(pid):
            continue
        watch.dead.add(pid)
        watch.count("healthy_harness")
        if pid in world.facts.killed or world.facts.stopped_for(pid) >= PATIENCE / 2:
            continue
        if world.facts.disk_was_full(within=15.0):
            continue
        found.append(("healthy_harness", f"harness {pid} of {session} died unasked"
                      f" ({_why(world, pid)})"))  # fmt: skip
    return found


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def _why(world: World, pid: int) -> str:
    rows = []
    try:
        lines = (world.state / "agentd.events.jsonl").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "no events"
    for line in lines:
        with contextlib.suppress(ValueError):  # a line cut by the full disk
            rows.append(json.loads(line))
    said = [f"{r.get('kind')}: {r.get('detail')}" for r in rows if r.get("pid") == pid]
    return "; ".join(said[-3:]) or "no event names it"


def acknowledged(world: World, watch: Watch, session: str) -> list[Violation]:
    """Every tool result the harness acknowledged is in its transcript, as it was reported."""
    found: list[Violation] = []
    path = world.state / "sessions" / session / f"{session}.jsonl"
    try:
        entries = scan(path.read_bytes()).entries
    except FileNotFoundError:  # never written, or deleted (the nemesis) and never recreated
        entries = []
    calls = {e.id: e for e in entries if isinstance(e, ToolCall)}
    results = {}
    for entry in entries:
        if isinstance(entry, ToolResult) and entry.call_id in calls:
            argv = calls[entry.call_id].args.get("argv", [])
            results[os.path.basename(str(argv[-1]))] = entry
    for row in world.received(session):
        token = row.get("token")
        if token is None:
            continue
        watch.count("acknowledged")
        result = results.get(str(token))
        if result is None and "error" in row:
            continue  # the spawn failed: its call may be answered `error`, or not written
        if result is None:
            found.append(("acknowledged", f"{session}: {token} acknowledged, not in the"
                          " transcript"))  # fmt: skip
        elif (
            not row.get("lost")
            and isinstance(result.output, dict)
            and result.output.get("code") != row["got"]
        ):
            found.append(("acknowledged", f"{session}: {token} recorded code"
                              f" {result.output.get('code')}, reported {row['got']}"))  # fmt: skip
    return found


def delivered(world: World, watch: Watch, sends: Iterable[dict[str, object]]) -> list[Violation]:
    """Exactly once at the engine (ADR 0034): a prompt acknowledged as delivered is recorded in
    its session's transcript exactly once, whatever harness or daemon died meanwhile, and no
    prompt, acknowledged or not, reached the engines of its session twice."""
    found: list[Violation] = []
    records: dict[str, dict[str, int]] = {}
    for session in world.sessions:
        counted = records[session] = {}
        for prompt_id in recorded_prompts(world, session):
            counted[prompt_id] = counted.get(prompt_id, 0) + 1
        taken: dict[str, int] = {}
        for row in world.received(session):
            if "received" in row:
                taken[str(row["received"])] = taken.get(str(row["received"]), 0) + 1
        for prompt_id, times in taken.items():
            watch.count("delivered")
            kept = counted.get(prompt_id, 0)
            if times > 1 or kept > 1:
                found.append(("delivered", f"{session}: prompt {prompt_id} reached its"
                              f" engines {times} times, recorded {kept}"))  # fmt: skip
    for send in sends:
        answer = send.get("delivered")
        if not isinstance(answer, dict):
            continue
        watch.count("delivered")
        session, prompt_id = str(answer["session"]), str(answer["prompt_id"])
        times = records.get(session, {}).get(prompt_id, 0)
        if times != 1:
            found.append(("delivered", f"{session}: prompt {prompt_id} acknowledged, recorded"
                          f" {times} times in its transcript"))  # fmt: skip
    return found


def recorded_prompts(world: World, session: str) -> list[str]:
    """The prompt ids the session's transcript records, once per record."""
    try:
        path = world.state / "sessions" / session / f"{session}.jsonl"
        entries = scan(path.read_bytes()).entries
    except FileNotFoundError:
        return []
    return [e.prompt_id for e in entries if isinstance(e, Message) and e.prompt_id is not None]


EX_PROTOCOL = 76
"""``tether``'s exit when the daemon closed the connection without an answer."""


def progress(world: World, watch: Watch, sends: Iterable[dict[str, object]]) -> list[Violation]:
    """Once the faults are undone, work ends: every live owner finishes a run, and every
    prompt delivered to a harness that is still alive has its tool's result acknowledged.
    (A stuck keeper, tool run or engine shows here, where no other check sees it.)"""
    found: list[Violation] = []
    for owner in world.owners.values():
        watch.count("progress")
        if not owner.results():
            found.append(("progress", f"{owner.name} finished no run"))
    acked = {str(row["token"]) for s in world.sessions for row in world.received(s)
             if "token" in row}  # fmt: skip
    took = {(str(row["received"]), row["pid"]) for s in world.sessions
            for row in world.received(s) if "received" in row}  # fmt: skip
    for send in sends:
        answer, order = send.get("delivered"), send.get("order")
        if not isinstance(answer, dict) or not isinstance(order, dict):
            continue
        pid = int(answer["pid"])
        if not _running(pid) or pid in world.facts.killed:
            continue
        if (str(answer["prompt_id"]), pid) not in took:
            continue  # an earlier harness recorded it, and died in its turn (sealed, not rerun)
        watch.count("progress")
        if str(order["token"]) not in acked:
            found.append(("progress", f"{order['token']} delivered to {pid}, which lives,"
                          " never finished"))  # fmt: skip
    return found


def answered(world: World, watch: Watch, sends: Iterable[dict[str, object]]) -> list[Violation]:
    """Every request ends within its bound, in success or a documented refusal (or, if the
    nemesis killed the daemon while it waited, in saying the daemon went away)."""
    found: list[Violation] = []
    for send in sends:
        watch.count("answered")
        code, stderr = send.get("code"), str(send.get("stderr"))
        started, ended = float(send["started"]), float(send["ended"])  # type: ignore[arg-type]
        if send.get("hung"):
            found.append(("answered", f"{send['op']} {send['session']} hung past its bound"))
        elif code == EX_PROTOCOL and world.facts.daemon_killed_between(started, ended):
            continue
        elif code not in EXIT_CODES:
            found.append(("answered", f"{send['op']} {send['session']} exited {code}:"
                          f" {stderr.strip()[-300:]}"))  # fmt: skip
        elif "Traceback" in stderr:
            found.append(("answered", f"{send['op']} {send['session']}: a traceback"))
        elif send.get("snapshot"):  # an inspection that succeeded must be one
            found.append(("answered", f"inspect {send['session']}: {send['snapshot']}"))
    return found


def daemon_memory(world: World, watch: Watch) -> list[Violation]:
    if world.daemon is None:
        return []
    watch.count("daemon_memory")
    try:
        rss = psutil.Process(world.daemon.pid).memory_info().rss
    except psutil.Error:
        return []
    if rss > DAEMON_RSS:
        return [("daemon_memory", f"daemon RSS {rss >> 20} MiB")]
    return []
