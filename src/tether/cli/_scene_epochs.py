"""Incident 004 in miniature, on epochs: a reclaimed session fences its old harness out."""

from __future__ import annotations

import os
import tempfile

from ..epochs import SessionRecord, SqliteEpochStore, Superseded
from ._timeline import Timeline, Verdict


async def replay_superseded(log: Timeline) -> list[Verdict]:
    with tempfile.TemporaryDirectory() as workdir:
        async with SqliteEpochStore(os.path.join(workdir, "epochs.sqlite3")) as store:
            old = await store.bump("s1")
            log.event("agentd", f"spawns the harness of s1 with epoch {old}")
            new = await store.bump("s1")
            log.event("agentd", f"reclaims s1: a fresh harness gets epoch {new}")
            await store.save("s1", SessionRecord(pid=4242, state="running"), epoch=new)
            try:
                await store.check("s1", old)
            except Superseded as exc:
                log.event("old harness", f"Superseded: {exc}")
                refused_check = exc.current == new
            else:  # pragma: no cover - the demo reports it as FAIL
                refused_check = False
            try:
                await store.save("s1", SessionRecord(pid=1313, state="phantom"), epoch=old)
            except Superseded:
                log.event("old harness", "its write of the session record is refused too")
                refused_save = True
            else:  # pragma: no cover - the demo reports it as FAIL
                refused_save = False
            record = await store.record("s1")
    return [
        Verdict(
            "the old epoch is refused, naming the current one", refused_check, f"{old} < {new}"
        ),
        Verdict(
            "a stale writer cannot overwrite the record",
            refused_save and record is not None and record.pid == 4242,
            "fenced in one transaction",
        ),
    ]
