"""``adopt_all``: a restarted daemon takes back the harnesses its store records, by identity.

A recorded harness is adopted only if the very same process still runs (same boot, pid and
creation time, not a zombie), was started for this very store (its ``TETHER_STORE_ID``: a
daemon on a copy of the store must not take, judge and kill the original's harnesses) and, on
a shared store, if the session is still this host's; it then has ``Settings.first_contact``
to reconnect (the start timeout, if its record says it had not said hello yet). One found
dead is reaped if it is ours and what it left is swept, unless a live harness of the session's
current epoch carries this store's mark: a previous daemon adopted or started it and could not
record it (a full disk, a kill before the write), and it is adopted instead of being
superseded by a fresh one. A session another host wrote last is shown ``elsewhere``.
"""

from __future__ import annotations

import psutil

from ..epochs import EpochStore, SessionRecord
from ..process import ProcessRef, find_twins, reap
from ..process._table import marks
from ._awake import AwakeClock
from ._events import EventKind
from ._guard import Tasks
from ._lease import HostLease
from ._lifecycle import Harnesses
from ._model import Harness
from ._registry import Sessions, valid_name
from ._settings import Settings
from ._state import SessionState


async def adopt_all(
    settings: Settings,
    store: EpochStore,
    lease: HostLease,
    sessions: Sessions,
    harnesses: Harnesses,
    tasks: Tasks,
    clock: AwakeClock,
) -> None:
    """Load every recorded session and adopt the live harnesses (see the module)."""
    for name in await store.sessions():
        record = await store.record(name)
        if record is None or not valid_name(name):
            continue
        session = sessions.get(name)
        session.known = True
        session.restarts = record.restarts
        session.reason = record.reason
        session.history = list(record.history)
        session.streak = record.streak
        session.next_attempt = record.next_attempt
        session.stall_detail = record.stalled
        recorded = SessionState.from_record(record.state)
        session.become(recorded)
        if record.host != lease.host:
            session.become(SessionState.ELSEWHERE)
            session.reason = session.last_event = f"host {record.host} wrote its record"
            continue
        if record.epoch is None:
            continue
        ref = _find(record)
        epoch, found = record.epoch, ""
        if ref is None or not ref.is_alive():
            unrecorded = await _unrecorded(store, record, name, harnesses, settings.harness_argv)
            if unrecorded is not None:  # what the record names is superseded: swept
                if ref is not None:
                    reap(ref)  # our zombie: a daemon restarted in-process
                tasks.start(harnesses.sweep, session, record.epoch, name=f"sweep {name}")
                ref, epoch = unrecorded
                found = f"found by its mark (the record names epoch {record.epoch}); "
            elif record.pid is None or record.create_time is None:
                continue
        if ref is None or not ref.is_alive():
            if ref is not None:
                reap(ref)  # our zombie: a daemon restarted in-process
            tasks.start(harnesses.sweep, session, record.epoch, name=f"sweep {name}")
            session.become(recorded if recorded.settled else SessionState.DEAD)
            detail = f"pid {record.pid} is gone (found dead after a restart)"
            sessions.emit(session, EventKind.EXITED, epoch=record.epoch, detail=detail)
            continue
        owner = _store_of(ref)
        if owner != harnesses.store_id:
            session.become(recorded if recorded.settled else SessionState.DEAD)
            detail = f"pid {record.pid} runs for another store ({owner or 'unmarked'}): left alone"
            sessions.emit(session, EventKind.EXITED, epoch=record.epoch, detail=detail)
            continue
        starting = recorded is SessionState.STARTING and not found
        harness = Harness(ref, epoch, None, since=clock.now(), starting=starting)
        if not await lease.claim(name, epoch):
            sessions.emit(session, EventKind.SUPERSEDED, harness, "another host took it over")
            tasks.start(harnesses.confirm_exit, session, harness, name=f"superseded {name}")
            continue
        harnesses.adopt(session, harness)
        if recorded is SessionState.STALLED:
            session.last_event = record.stalled or "stalled"  # until its first pong says more
        elif starting:
            session.become(SessionState.STARTING)
        elif recorded is not SessionState.FAILED:
            session.become(SessionState.DISCONNECTED)
        wait = settings.first_contact(starting=starting)
        if starting:  # spawned just before the restart: it has the start timeout for hello
            detail = f"adopted while starting; waiting {wait:.1f}s for its hello"
        else:
            detail = f"{found}waiting {wait:.1f}s for it to reconnect"
        sessions.emit(session, EventKind.ADOPTED, harness, detail)


def _find(record: SessionRecord) -> ProcessRef | None:
    """The recorded harness, if the very same process exists (zombie or not)."""
    if record.pid is None or record.create_time is None:
        return None
    return ProcessRef.find(record.pid, record.create_time, record.boot_id)


async def _unrecorded(
    store: EpochStore,
    record: SessionRecord,
    session: str,
    harnesses: Harnesses,
    argv: tuple[str, ...],
) -> tuple[ProcessRef, int] | None:
    """The live harness of the session's current epoch that no record names, and its epoch:
    of the processes marked with that epoch for this host and store, the top one running
    ``argv`` (its children carry the same mark, and one between fork and exec looks just like
    it; an orphaned keeper or tool runs something else). Only a record older than the current
    epoch can miss one (an epoch is bumped before its harness starts, and recorded after), so
    a record of the current epoch costs no scan of the process table: none after a reboot."""
    current = await store.current(session)
    if current is None or record.epoch is None or current <= record.epoch:
        return None
    if harnesses.store_id is None:
        return None
    marked = find_twins(session, epoch=current, host=harnesses.host, store=harnesses.store_id)
    pids = {ref.pid for ref in marked}
    for ref in marked:
        try:
            stat = ref.stat()
            if stat is None or stat.ppid in pids or stat.state == "Z":
                continue
            if tuple(psutil.Process(ref.pid).cmdline()) == argv:
                return ref, current
        except (OSError, psutil.Error):
            continue
    return None


def _store_of(ref: ProcessRef) -> str | None:
    """The store a harness was started for (``TETHER_STORE_ID`` in its environment)."""
    mark = marks(ref.pid)
    return None if mark is None else mark.store
