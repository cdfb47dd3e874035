"""The campaign: a seeded sequence of steps (work and faults, drawn by weight) against one
world, with every invariant checked after each step and once more after the faults are
undone and every session is asked to start. A failing seed names the command replaying it."""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import trio

from torture import invariants, nemesis
from torture.world import World, keeper_of

WEIGHTS = {
    "send": 30, "start": 6, "inspect": 4,
    "kill_daemon": 3, "stop_daemon": 4,
    "kill_harness": 3, "stop_harness": 3,
    "kill_harness_keeper": 3, "stop_harness_keeper": 3,
    "kill_harness_tool": 4, "stop_harness_tool": 3,
    "kill_owner": 4, "stop_owner": 2,
    "kill_owner_keeper": 4, "stop_owner_keeper": 3,
    "kill_owner_tool": 4, "stop_owner_tool": 3,
    "lock_store": 3, "copy_store": 1, "fill_disk": 2,
    "exhaust_fds": 2, "half_frames": 2, "garbage": 2, "swap_log": 1,
}  # fmt: skip
"""How often each action is drawn, relative to the others."""
STRANGER = {"hostile_name": 1, "unlink_transcript": 2, "litter": 2}
"""The stranger's faults (issue 40) and their weights, drawn after a step with probability
``STRANGER_RATE`` from a random stream of their own (see ``nemesis.strangers``)."""
STRANGER_RATE = 0.06
WORK = {"send", "start", "inspect"}
"""The actions that are work, not faults."""
SESSIONS, OWNERS = 3, 2
PROGRESS = 40.0
"""Seconds the work in flight has to end once the faults are undone."""
STEP_PAUSE = (0.02, 0.3)
"""Seconds between steps, drawn at random: faults land at random points of the work."""


@attrs.define
class Report:
    seed: int
    steps: int = 0
    faults: collections.Counter[str] = attrs.Factory(collections.Counter)
    checks: dict[str, int] = attrs.Factory(dict)
    violations: list[tuple[int, str, str]] = attrs.Factory(list)
    log: list[str] = attrs.Factory(list)
    seconds: float = 0.0

    def replay(self) -> str:
        return f"python tests/torture/run.py --seed {self.seed} --steps {self.steps}"

    def text(self) -> str:
        lines = [f"seed {self.seed}: {self.steps} steps in {self.seconds:.0f}s,"
                 f" {len(self.violations)} violations"]  # fmt: skip
        for step, name, detail in self.violations[:20]:
            lines.append(f"  step {step}: {name}: {detail}")
        if self.violations:
            lines.append("  the last steps:")
            lines += [f"    {entry}" for entry in self.log[-15:]]
            lines.append(f"  replay: {self.replay()}")
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def world(run_id: str, keep: list[object]) -> AsyncIterator[World]:
    """A fresh world: its daemon, sessions and owners running; everything stopped after, and
    its directory removed unless ``keep[0]`` is set by then (a failed seed's evidence, with
    the steps that follow it in ``keep``)."""
    root = Path(tempfile.mkdtemp(prefix="tether-torture-"))
    root.chmod(0o700)
    (root / "state").mkdir(mode=0o700)
    mounted = _mount(root / "state")
    sessions = [f"t{run_id}-{i}" for i in range(SESSIONS)]
    here = World(root, sessions)
    try:
        here.start_daemon()
        await here.listening()
        for slot in range(OWNERS):
            here.start_owner(slot)
        yield here
    finally:
        with trio.CancelScope(shield=True):
            await _teardown(here)
        if keep[0]:
            evidence = root.with_name(root.name + "-evidence")
            shutil.copytree(root, evidence, symlinks=True, ignore=_not_files)
            (evidence / "steps.log").write_text("\n".join(keep[1:]))  # type: ignore[arg-type]
            print(f"the failed world is kept in {evidence}", flush=True)
        if mounted:
            subprocess.run(["umount", "-l", str(root / "state")], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _not_files(directory: str, names: list[str]) -> set[str]:
    """What the evidence leaves out: the ballast, and anything but directories, regular
    files and symlinks (a FIFO or a device put in a log's place must not be read)."""
    left = {"ballast"}
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            left.add(name)
    return left


def _mount(path: Path) -> bool:
    """A small disk of its own for the state directory, to fill (root only)."""
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs",
                           str(path)], capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0


async def _teardown(here: World) -> None:
    """Stop the owners and the daemon with its harnesses; leave nothing running."""
    for pid, spans in here.facts.stops.items():
        if any(end == float("inf") for _, end in spans):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 18)  # SIGCONT
    for owner in here.owners.values():
        owner.process.kill()
        await trio.to_thread.run_sync(owner.process.wait)
    if here.daemon is not None:
        here.daemon.terminate()
        await trio.to_thread.run_sync(here.daemon.wait)
    owners = [*here.owners.values(), *here.retired]  # a violation may have left one running
    for session in [*here.sessions, *(owner.session for owner in owners)]:
        for pid, _ in invariants.group_of(session):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    with trio.move_on_after(10):
        while _reap_orphans():
            await trio.sleep(0.05)


def _reap_orphans() -> bool:
    """Reap what came to this process (a subreaper); whether anything is still below it."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


async def run(seed: int, steps: int, *, seconds: float | None = None) -> Report:
    """Run ``steps`` steps of seed ``seed`` (or as many as fit in ``seconds``)."""
    report = Report(seed)
    rng = random.Random(seed)
    sends = nemesis.Sends()
    actions = {"send": nemesis.sender(sends), "start": nemesis.starter(sends),
               "inspect": nemesis.inspector(sends),
               "swap_log": nemesis.log_swapper(sends),
               "stop_daemon": nemesis.daemon_stopper(sends), **nemesis.faults()}  # fmt: skip
    names = list(WEIGHTS)
    weights = [WEIGHTS[name] for name in names]
    stranger = random.Random(f"{seed}-stranger")
    strangers = nemesis.strangers(sends)
    watch = invariants.Watch()
    began = time.monotonic()
    keep: list[object] = [False]
    async with world(f"{seed}-{os.getpid()}", keep) as here, trio.open_nursery() as background:
        for step in range(1, steps + 1):
            if seconds is not None and time.monotonic() - began > seconds:
                break
            report.steps = step
            name = rng.choices(names, weights)[0]
            if name == "send" and sends.running > 20:
                name = "start"
            await _doom(here, watch, name)
            said = await actions[name](here, rng, background)
            report.faults[name] += 1
            report.log.append(f"{step} {time.monotonic() - began:7.2f}s {said}")
            if stranger.random() < STRANGER_RATE:
                extra = stranger.choices(list(STRANGER), list(STRANGER.values()))[0]
                said = await strangers[extra](here, stranger, background)
                report.faults[extra] += 1
                report.log.append(f"{step} {time.monotonic() - began:7.2f}s (stranger) {said}")
            for violation in await _check(here, watch, sends):
                report.violations.append((step, *violation))
            if report.violations:
                break
            await trio.sleep(rng.uniform(*STEP_PAUSE))
        if not report.violations:
            for violation in await _settle(here, watch, sends):
                report.violations.append((report.steps, *violation))
        keep[:] = [bool(report.violations), *report.log]
        background.cancel_scope.cancel()
    report.checks = watch.counts
    report.seconds = time.monotonic() - began
    return report


async def _doom(here: World, watch: invariants.Watch, name: str) -> None:
    """Before an owner is killed, note its group's processes: they must all go."""
    if name != "kill_owner":
        return
    for owner in here.owners.values():
        keepers = {pid for pid in [keeper_of(owner.process.pid)] if pid is not None}
        tree = invariants.group_of(owner.session)
        watch.doomed.append(invariants.Doomed(owner, 0.0, tree, keepers))


async def _check(
    here: World, watch: invariants.Watch, sends: nemesis.Sends
) -> list[invariants.Violation]:
    for doomed in watch.doomed:
        if doomed.killed == 0.0:
            killed = here.facts.killed.get(doomed.owner.process.pid)
            doomed.killed = killed if killed is not None else -1.0
    watch.doomed = [d for d in watch.doomed if d.killed > 0]
    found = invariants.no_survivor(here, watch) + invariants.no_zombie(here, watch, here.spawned)
    found += invariants.healthy_harnesses(here, watch)
    found += invariants.daemon_memory(here, watch)
    for owner in [*here.owners.values(), *here.retired]:
        rows = watch.new(owner.name, owner.results())
        found += invariants.honest_status(rows, here, watch, owner.name)
        found += invariants.released(rows, watch, owner.name)
    for session in here.sessions:
        rows = watch.new(session, here.received(session))
        found += invariants.honest_status(rows, here, watch, session)
    found += invariants.answered(here, watch, watch.new("requests", sends.done))
    return found


async def _settle(
    here: World, watch: invariants.Watch, sends: nemesis.Sends
) -> list[invariants.Violation]:
    """Undo every fault, let the work finish, and check what must hold once it has: every
    session starts again, every acknowledged result is in its transcript, every delivered
    prompt reached its engine, every killed owner's tree is gone."""
    found: list[invariants.Violation] = []
    with trio.move_on_after(60):
        while sends.running or any(
            end == float("inf") for spans in here.facts.stops.values() for _, end in spans
        ):
            await trio.sleep(0.1)
    await trio.sleep(invariants.BOUND + 1)
    for session in here.sessions:
        answer = await here.tether("start", session, bound=120)
        if answer is None or answer[0] != 0:
            found.append(("answered", f"start {session} after the faults: {answer}"))
    async with trio.open_nursery() as last:  # one more prompt each, with no fault about
        for session in here.sessions:
            order = {"token": f"last-{session}", "code": 5, "sleep": 0.1, "escape": False}
            nemesis.request(here, sends, last, "send", session, json.dumps(order))
    found += await _check(here, watch, sends)
    with trio.move_on_after(invariants.BOUND + invariants.HEADROOM + 1):
        while watch.doomed:
            found += invariants.no_survivor(here, watch)
            await trio.sleep(0.1)
    with trio.move_on_after(PROGRESS):  # work in flight ends once the faults are undone
        while invariants.progress(here, invariants.Watch(), sends.done):
            await trio.sleep(0.2)
    found += invariants.progress(here, watch, sends.done)
    with trio.move_on_after(invariants.BOUND + invariants.HEADROOM):
        while invariants.no_litter(here, invariants.Watch()):
            await trio.sleep(0.1)
    found += invariants.no_litter(here, watch)
    for session in here.sessions:
        found += invariants.acknowledged(here, watch, session)
    found += invariants.delivered(here, watch, sends.done)
    return found


REGRESSION = (101, 102, 103, 104)
"""Seeds that found violations once (issue 40: nobody had used them before)."""


def fresh_seed() -> int:
    """A seed drawn from the system's randomness, small enough to type in a replay command."""
    return random.SystemRandom().randrange(1_000, 1_000_000_000)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="tether's fault campaign")
    parser.add_argument("--seed", type=int, action="append", help="run this seed (repeatable)")
    parser.add_argument("--seeds", type=int, default=1, help="how many fresh random seeds")
    parser.add_argument("--first", type=int, default=None, help="consecutive seeds from this")
    parser.add_argument("--regression", action="store_true",
                        help=f"the seeds that once failed, too: {REGRESSION}")  # fmt: skip
    parser.add_argument("--steps", type=int, default=2000, help="steps per seed")
    parser.add_argument("--seconds", type=float, default=None, help="at most this long a seed")
    args = parser.parse_args(argv)
    if args.seed:
        seeds = list(args.seed)
    elif args.first is not None:
        seeds = list(range(args.first, args.first + args.seeds))
    else:  # never the same seeds twice: the campaign must not be tuned to its own
        seeds = [fresh_seed() for _ in range(args.seeds)]
    if args.regression:
        seeds += [seed for seed in REGRESSION if seed not in seeds]
    print(f"seeds: {' '.join(map(str, seeds))}", flush=True)
    total: collections.Counter[str] = collections.Counter()
    checks: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    for seed in seeds:
        report = trio.run(functools.partial(run, seed, args.steps, seconds=args.seconds))
        print(report.text(), flush=True)
        total.update(report.faults)
        checks.update(report.checks)
        if report.violations:
            failures.append(f"{seed} ({report.replay()})")
    faults = sum(n for name, n in total.items() if name not in WORK)
    print(f"\n{sum(total.values())} steps ({faults} faults) over {len(seeds)} seeds,"
          f" {len(failures)} failed: {' '.join(failures) or 'none'}")  # fmt: skip
    print("| action | kind | steps |\n| --- | --- | --- |")
    for name, count in sorted(total.items(), key=lambda item: (item[0] in WORK, item[0])):
        print(f"| {name} | {'work' if name in WORK else 'fault'} | {count} |")
    print("\n| invariant | checks |\n| --- | --- |")
    for name, count in sorted(checks.items()):
        print(f"| {name} | {count} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
