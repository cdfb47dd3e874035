"""The escalation policy, as one named function: SIGINT, SIGTERM, SIGKILL, then reap.

Each step goes to every process group we lead (after confirming a member by identity, since a
bare ``killpg`` could hit a reused group id) and, one by one through their identity, to the
processes that left those groups (``setsid``, double forks). After each step we wait up to the
grace for all of them to be gone, reaping the zombies that are ours: our own children through
their ``Child``, adopted orphans directly. The table is re-read before each step, so processes
forked or orphaned meanwhile are caught too.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Collection

import anyio

from .. import _backend
from ._proc import read_stat
from ._ref import ProcessRef
from ._registry import SPAWNED
from ._table import descendants, refs, snapshot

logger = logging.getLogger("tether.process")

KILL_WAIT = 1.0
"""How long to wait for SIGKILLed processes to be gone and reaped."""


async def stop_processes(
    collect: Callable[[], set[ProcessRef]],
    groups: Collection[ProcessRef],
    grace: float,
    *,
    in_thread: bool = False,
    interrupt: bool = True,
) -> list[ProcessRef]:
    """Stop every process ``collect()`` returns; the ones still there at the end (logged).

    ``in_thread``: read the table and send the signals in a worker thread (a sweep of
    thousands of processes); otherwise inline, which is cheaper for a group's few children.
    ``interrupt=False`` starts at SIGTERM (the MCP spec's ladder, whose first step is closing
    the server's stdin). Bounded by ``2 * grace + KILL_WAIT`` plus the cost of reading the
    process table.
    """
    targets: set[ProcessRef] = set()
    steps = ((signal.SIGINT, grace), (signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT))
    for sig, wait in steps if interrupt else steps[1:]:
        targets |= _unfinished(await _collect(collect, wait, in_thread), targets)
        if not targets:
            return []
        if sig == signal.SIGKILL:
            if len(targets) > _NAMED:
                logger.warning("SIGKILL to %d processes after %.1fs of grace", len(targets),
                               (2 if interrupt else 1) * grace)  # fmt: skip
            else:
                for target in targets:
                    logger.warning("SIGKILL to %s after %.1fs of grace", target.describe(),
                                   (2 if interrupt else 1) * grace)  # fmt: skip
        signals = (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,)
        if in_thread:
            await anyio.to_thread.run_sync(_deliver_all, signals, targets, groups)
        else:
            _deliver_all(signals, targets, groups)
        with _backend.move_on_after(wait):
            await wait_gone(targets, reap=True)
    found = await _collect(collect, KILL_WAIT, in_thread)
    survivors = sorted(targets | _unfinished(found, targets), key=lambda ref: ref.pid)
    for survivor in survivors:
        logger.error("survived SIGKILL: %s state=%s", survivor.describe(), survivor.state())
    return survivors


_NAMED = 20
"""Past this many SIGKILLs, one log line counts them instead of naming each."""


def _deliver_all(
    signals: tuple[int, ...], targets: set[ProcessRef], groups: Collection[ProcessRef]
) -> None:
    for sig in signals:
        _deliver(sig, set(targets), groups)


async def _collect(
    collect: Callable[[], set[ProcessRef]], within: float, in_thread: bool
) -> set[ProcessRef]:
    """``collect()``, tried again every 10 ms for ``within`` seconds while the process table
    cannot be read for want of descriptors (then the targets known so far are all there is):
    a teardown is never given up for a moment of ``EMFILE``."""
    deadline = _backend.current_time() + within
    while True:
        try:
            return await anyio.to_thread.run_sync(collect) if in_thread else collect()
        except OSError as exc:
            if _backend.current_time() >= deadline:
                logger.warning("cannot read the process table now (%s); stopping what is known",
                               exc.strerror)  # fmt: skip
                return set()
        await _backend.sleep(0.01)


def _unfinished(found: set[ProcessRef], targets: set[ProcessRef]) -> set[ProcessRef]:
    """``found`` less what is gone since and the zombies that are done with: ours are reaped
    here, and another parent's are its own business (a slow init may keep one for a while)."""
    pids = {ref.pid for ref in found | targets}
    unfinished = set()
    for ref in found:
        state = ref.state()  # None: gone since it was found (reaped by its keeper, say)
        if state is not None and not (state == "Z" and _reap(ref, pids)):
            unfinished.add(ref)
    return unfinished


def _deliver(sig: int, targets: set[ProcessRef], groups: Collection[ProcessRef]) -> None:
    leaders = {leader.pid for leader in groups}
    confirmed: set[int] = set()
    loose: list[ProcessRef] = []
    for target in targets:
        try:
            stat = target.stat()
        except OSError:  # no descriptor to spare: signal it on its own
            stat = None
        if stat is not None and stat.pgrp in leaders:
            confirmed.add(stat.pgrp)
        else:
            loose.append(target)
    for pgid in confirmed:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            continue
    for target in loose:
        target.send_signal(sig)


async def wait_gone(targets: set[ProcessRef], *, reap: bool = False, cap: float = 0.02) -> None:
    """Poll, backing off up to ``cap`` seconds, until no target is left; ``targets`` keeps the
    ones still there (wrap it in a timeout). A zombie counts as gone; with ``reap``, only once
    it is done with: ours are reaped (a ``Child`` keeps its status), another parent's are its
    business, unless that parent is a target too (its zombie comes to us when it dies)."""
    delay = 0.001
    while True:
        pids = {target.pid for target in targets}
        for n, target in enumerate(list(targets), 1):
            if n % _CHUNK == 0:  # thousands of targets: let the caller's other tasks run
                await _backend.checkpoint()
            state = target.state()
            if state is None or (state == "Z" and (not reap or _reap(target, pids))):
                targets.discard(target)
        if not targets:
            return
        await _backend.sleep(delay)
        delay = min(delay * 2, cap)


_CHUNK = 256
"""Targets ``wait_gone`` checks between two checkpoints."""


def _reap(zombie: ProcessRef, targets: set[int]) -> bool:
    """Reap a zombie if it is ours; whether it is done with (reaped, or dead and not ours)."""
    child = SPAWNED.get(zombie.pid)
    if child is not None:
        return child.poll() is not None
    parent = zombie.ppid()
    if parent != os.getpid():
        # A parent we are stopping dies soon and the zombie is reparented to us; any other
        # parent (a twin's supervisor) reaps it itself.
        if parent is None or parent not in targets:
            return True
        # A parent whose leader is a zombie already but whose last threads are still exiting
        # hands it on in a moment, to the parent's own reaper: done with, unless that is us.
        stat = read_stat(parent)
        return stat is not None and stat.state == "Z" and stat.ppid != os.getpid()
    try:
        pid, _ = os.waitpid(zombie.pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return pid != 0


def tree_of(root: ProcessRef) -> set[ProcessRef]:
    """``root`` and all its descendants that exist now."""
    if root.state() is None:
        return set()
    return {root} | refs(descendants(snapshot(), [root.pid]))
