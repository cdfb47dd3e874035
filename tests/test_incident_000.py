"""Incident 000 in miniature: a worker gets SIGTERM while its tools' processes run.

A harness-like program reads signals with ``tether.signals`` and owns a ``ChildGroup`` whose
child has a plain child, a ``setsid`` grandchild, a ``nohup`` sleeper and a double-forked
daemon. A separate process sends SIGTERM. The log names that process; the program exits 143;
nothing carrying the session's mark is left alive, and no zombie.
(The transcript half of the incident is tether.journal's, issue 4.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

from helpers import (
    TREE,
    count_named,
    kill_marked,
    killer_argv,
    lingering_killer,
    marked,
    unique_session,
    wait_until,
    zombie_children,
)

HARNESS = """
import logging, os, signal, sys, trio, tether, tether.signals
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
session, tree, ready = sys.argv[1], sys.argv[2], sys.argv[3]

async def main() -> int:
    async with tether.signals.receive(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as events:
        async with tether.ChildGroup(session, 1, grace=0.2) as group:
            await group.spawn([sys.executable, "-c", tree, ready + ".tree"])
            while not os.path.exists(ready + ".tree"):
                await trio.sleep(0.005)
            open(ready, "w").write(str(os.getpid()))
            event = await events.recv()
        return 128 + event.signo

sys.exit(trio.run(main))
"""


async def test_incident_000_sigterm_names_its_sender_and_leaves_no_survivor(
    tmp_path: Path,
) -> None:
    session = unique_session()
    ready = tmp_path / "ready"
    with subprocess.Popen(
        [sys.executable, "-c", HARNESS, session, textwrap.dedent(TREE), str(ready)],
        stderr=subprocess.PIPE,
        text=True,
    ) as harness:
        try:
            await wait_until(lambda: ready.exists() and ready.read_text() != "")
            await wait_until(lambda: count_named(session, "sleep") == 5)
            killer = lingering_killer("TERM", harness.pid)
            try:
                with trio.fail_after(10):
                    _, log = await trio.to_thread.run_sync(harness.communicate)
            finally:
                killer.communicate("\n", timeout=10)
            code = harness.returncode
        finally:
            harness.kill()
            kill_marked(session)  # if the harness died before its teardown
    assert code == 128 + signal.SIGTERM
    cmd = " ".join(killer_argv("TERM", harness.pid))
    assert f"received SIGTERM from pid={killer.pid} uid={os.getuid()} cmd={cmd}" in log, log
    assert marked(session) == [], "a process of the SIGTERMed worker survived it"
    assert zombie_children() == []
