"""The nemesis: each action does one fault (or one piece of ordinary work) to the world at a
random point, and writes down in ``world.facts`` what it did, so the invariants can tell a
fault's effect from a bug. Faults that last (a stop, a lock, a full disk, a flood) are undone
by a task of their own while the campaign goes on."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
import uuid
from collections.abc import Awaitable, Callable

import attrs
import psutil
import trio

from torture.ground import (
    copy_store,
    exhaust_fds,
    fill_disk,
    garbage,
    half_frames,
    lock_store,
)
from torture.world import World, keeper_of, tools_of

Action = Callable[[World, random.Random, trio.Nursery], Awaitable[str]]


@attrs.define
class Sends:
    """Every ``tether send`` the campaign made and how it ended."""

    done: list[dict[str, object]] = attrs.Factory(list)
    running: int = 0


def _note_tool(world: World, pid: int) -> None:
    """Note the token of the tool ``pid`` runs (its ``sh -c SCRIPT MARKER``)."""
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return
    if len(argv) == 4 and argv[0] == "sh":
        world.facts.tools.add(os.path.basename(argv[3]))


def kill(world: World, pid: int | None, what: str) -> str:
    if pid is None:
        return f"no {what} to kill"
    _note_tool(world, pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return f"{what} {pid} was gone"
    world.facts.killed[pid] = time.monotonic()
    return f"SIGKILL {what} {pid}"


def stop(world: World, pid: int | None, what: str, seconds: float, nursery: trio.Nursery) -> str:
    if pid is None:
        return f"no {what} to stop"
    _note_tool(world, pid)
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return f"{what} {pid} was gone"
    spans = world.facts.stops.setdefault(pid, [])
    spans.append((time.monotonic(), float("inf")))
    index = len(spans) - 1

    async def resume() -> None:
        try:
            await trio.sleep(seconds)
        finally:  # cancelled too: the campaign ends with nothing stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            spans[index] = (spans[index][0], time.monotonic())

    nursery.start_soon(resume)
    return f"SIGSTOP {what} {pid} for {seconds:.1f}s"


def _session(world: World, rng: random.Random) -> str:
    return rng.choice(world.sessions)


def _owner(world: World, rng: random.Random) -> int:
    return rng.choice(sorted(world.owners))


# -- ordinary work -------------------------------------------------------------------------


def request(world: World, sends: Sends, nursery: trio.Nursery, *args: str) -> None:
    """Run ``tether ARGS`` in the background and keep how it ended in ``sends``."""

    async def run() -> None:
        sends.running += 1
        started = time.monotonic()
        try:
            answer = await world.tether(*args, bound=120)
        finally:
            sends.running -= 1
        record: dict[str, object] = {"op": args[0], "session": args[1], "started": started,
                                     "ended": time.monotonic()}  # fmt: skip
        if answer is None:
            record["hung"] = True
        else:
            record["code"], out, record["stderr"] = answer
            if answer[0] == 0 and args[0] == "send":
                record["delivered"] = json.loads(out)
            if answer[0] == 0 and args[0] == "inspect":
                record["snapshot"] = _snapshot_shape(out)
        if args[0] == "send":
            record["order"] = json.loads(args[2])
        sends.done.append(record)

    nursery.start_soon(run)


def _snapshot_shape(out: str) -> str:
    """``""`` if ``out`` is an inspection naming the harness's engine task, else what is wrong."""
    try:
        found = json.loads(out)
        names = {task["name"] for task in found["snapshot"]["tasks"]}
    except (ValueError, KeyError, TypeError) as exc:
        return f"not a snapshot: {exc!r}: {out[:200]!r}"
    return "" if "engine" in names else f"no engine task among {sorted(names)[:10]}"


def inspector(sends: Sends) -> Action:
    async def inspect(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        """Ask for a session's snapshot while the faults go on (``tether inspect --json``)."""
        session = _session(world, rng)
        request(world, sends, nursery, "inspect", session, "--json")
        return f"inspect {session}"

    return inspect


def sender(sends: Sends) -> Action:
    async def send(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        session = _session(world, rng)
        token = f"h{uuid.uuid4().hex[:10]}"
        order = {"token": token, "code": rng.choice([0, 0, 2, 7]),
                 "sleep": rng.choice([0.0, 0.1, 0.5]), "escape": rng.random() < 0.2}  # fmt: skip
        request(world, sends, nursery, "send", session, json.dumps(order))
        return f"send {token} to {session}"

    return send


def starter(sends: Sends) -> Action:
    async def start(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        session = _session(world, rng)
        request(world, sends, nursery, "start", session)
        return f"start {session}"

    return start


# -- the daemon ----------------------------------------------------------------------------


async def kill_daemon(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    assert world.daemon is not None
    old = world.daemon
    said = kill(world, old.pid, "daemon")
    world.facts.daemon_killed.append(time.monotonic())
    await trio.to_thread.run_sync(old.wait)
    world.spawned.discard(old.pid)
    down = time.monotonic()
    world.start_daemon()
    await world.listening()
    world.facts.daemon_down.append((down, time.monotonic()))
    assert world.daemon is not None
    return f"{said}; restarted as {world.daemon.pid}"


def daemon_stopper(sends: Sends) -> Action:
    async def stop_daemon(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        """SIGSTOP the daemon; half the time a few milliseconds after a ``start``, so the
        stop lands while the daemon judges a harness."""
        assert world.daemon is not None
        said = ""
        if rng.random() < 0.5:
            session = _session(world, rng)
            request(world, sends, nursery, "start", session)
            await trio.sleep(rng.uniform(0.0, 0.08))
            said = f"start {session}, then "
        seconds = rng.uniform(0.2, 4.0)
        now = time.monotonic()
        world.facts.daemon_down.append((now, now + seconds))
        return said + stop(world, world.daemon.pid, "daemon", seconds, nursery)

    return stop_daemon


# -- harnesses, their keepers and tools ----------------------------------------------------


Pick = Callable[[World, random.Random], "int | None"]


def kill_and_stop(what: str, pick: Pick, longest: float) -> tuple[Action, Action]:
    """The two faults of one kind of process: SIGKILL it, and SIGSTOP it for up to
    ``longest`` seconds; ``pick`` finds one (``None``: there is none now)."""

    async def kill_it(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        return kill(world, pick(world, rng), what)

    async def stop_it(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        return stop(world, pick(world, rng), what, rng.uniform(0.1, longest), nursery)

    return kill_it, stop_it


def _harness(world: World, rng: random.Random) -> int | None:
    return world.harness(_session(world, rng))


def _harness_keeper(world: World, rng: random.Random) -> int | None:
    pid = _harness(world, rng)
    return keeper_of(pid) if pid is not None else None


def _harness_tool(world: World, rng: random.Random) -> int | None:
    pid = _harness(world, rng)
    tools = tools_of(pid) if pid is not None else []
    return rng.choice(tools) if tools else None


# -- owners, their keepers and tools -------------------------------------------------------


async def kill_owner(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    """SIGKILL an owner (half the time while it is deaf: its keeper's reports unread)."""
    slot = _owner(world, rng)
    owner = world.owners.pop(slot)
    deaf = rng.random() < 0.5
    if deaf:
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner.process.pid, signal.SIGUSR1)
        await trio.sleep(rng.uniform(0.2, 0.8))
    said = kill(world, owner.process.pid, f"{'deaf ' if deaf else ''}{owner.name}")
    await trio.to_thread.run_sync(owner.process.wait)
    world.spawned.discard(owner.process.pid)
    world.retired.append(owner)
    world.start_owner(slot)
    return said


def _owner_pid(world: World, rng: random.Random) -> int | None:
    return world.owners[_owner(world, rng)].process.pid


def _owner_keeper(world: World, rng: random.Random) -> int | None:
    return world.owners[_owner(world, rng)].keeper()


def _owner_tool(world: World, rng: random.Random) -> int | None:
    tools = tools_of(world.owners[_owner(world, rng)].process.pid)
    return rng.choice(tools) if tools else None


def log_swapper(sends: Sends) -> Action:
    async def swap_log(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        """Replace a session's harness log by a FIFO or a symlink to a device, as any tool
        the agent runs could, and ask for it (refused or read, within its bound)."""
        session = _session(world, rng)
        log = world.state / "sessions" / session / "harness.log"
        kind = rng.choice(["fifo", "zero", "urandom"])
        with contextlib.suppress(FileNotFoundError):
            log.unlink()
        try:
            if kind == "fifo":
                os.mkfifo(log)
            else:
                log.symlink_to(f"/dev/{kind}")
        except OSError as exc:
            return f"no swap of {session}'s log: {exc}"
        request(world, sends, nursery, "logs", session)
        return f"swap {session}'s log for {kind} and ask for it"

    return swap_log


# -- what a stranger does: a hostile user, a buggy tool (issue 40) ---------------------------

HOSTILE = ["agentd.events.jsonl", "epochs.sqlite3-journal", "epochs.sqlite3-wal", "agentd.sock",
           "sessions", "harness.log"]  # fmt: skip
"""Session names that were the daemon's own files when sessions shared its directory."""


def hostile_namer(sends: Sends) -> Action:
    async def hostile_name(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        """Start a session named like one of the daemon's files (any tool an agent runs can:
        it inherits ``TETHER_AGENTD``); from now on it is one of the world's sessions, held to
        every invariant, through every later daemon restart."""
        names = [name for name in HOSTILE if name not in world.sessions]
        if not names:
            return "every hostile name is a session already"
        name = rng.choice(names)
        world.sessions.append(name)
        request(world, sends, nursery, "start", name)
        return f"start a session named {name}"

    return hostile_name


async def unlink_transcript(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    """Delete a session's transcript while its harness may be writing it (``rm`` by a tool):
    what was acknowledged must come back at the next commit, or when the next harness opens
    it."""
    session = _session(world, rng)
    path = world.state / "sessions" / session / f"{session}.jsonl"
    try:
        path.unlink()
    except FileNotFoundError:
        return f"{session} has no transcript to delete"
    return f"delete {session}'s transcript"


def litterer(sends: Sends) -> Action:
    async def litter(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
        """Send a prompt whose tool leaves a fork loop's worth of ``setsid`` sleepers (a leaky
        ``make -j``): its group, or the daemon's sweep if a fault kills the harness first,
        must stop them all while the daemon keeps answering."""
        session = _session(world, rng)
        token = f"l{uuid.uuid4().hex[:10]}"
        count = rng.choice([50, 150, 300])
        order = {"token": token, "code": 0, "sleep": rng.choice([0.0, 0.5]), "escape": False,
                 "litter": count}  # fmt: skip
        request(world, sends, nursery, "send", session, json.dumps(order))
        return f"send {token} to {session}, leaving {count} sleepers"

    return litter


def strangers(sends: Sends) -> dict[str, Action]:
    """The stranger's faults, by name; drawn from a stream of their own, so adding them left
    every older seed's sequence of the other actions as it was."""
    return {"hostile_name": hostile_namer(sends), "unlink_transcript": unlink_transcript,
            "litter": litterer(sends)}  # fmt: skip


def faults() -> dict[str, Action]:
    """Every fault the nemesis has, by name (``stop_daemon``, ``swap_log`` and the work are
    made with the campaign's request log)."""
    found: dict[str, Action] = {
        "kill_daemon": kill_daemon, "kill_owner": kill_owner,
        "lock_store": lock_store, "copy_store": copy_store, "fill_disk": fill_disk,
        "exhaust_fds": exhaust_fds, "half_frames": half_frames, "garbage": garbage,
    }  # fmt: skip
    for name, pick, longest in (
        ("harness", _harness, 3.0),
        ("harness_keeper", _harness_keeper, 3.0),
        ("harness_tool", _harness_tool, 2.0),
        ("owner_keeper", _owner_keeper, 3.0),
        ("owner_tool", _owner_tool, 2.0),
    ):
        found[f"kill_{name}"], found[f"stop_{name}"] = kill_and_stop(
            name.replace("_", " "), pick, longest
        )
    found["stop_owner"] = kill_and_stop("owner", _owner_pid, 2.0)[1]
    return found
