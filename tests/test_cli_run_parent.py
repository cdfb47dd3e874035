"""``tether run --die-with-parent`` (issue 46) with real processes: when the process that started
it dies, SIGKILL included, CMD's whole tree is stopped, ``setsid`` and ``nohup`` escapes and
processes ignoring SIGTERM included; a spawning thread that exits while its process lives is
not a death."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from helpers import alive, python, sleepers, wait_until
from test_doc_blocks import block

GRACE = 0.3
RUN = [sys.executable, "-m", "tether", "run", "--die-with-parent", "--grace", str(GRACE)]
HEADROOM = 5.0  # a loaded 2-core machine; the watcher itself answers at once
SLEEPS = {"2000", "2001", "2002", "2003", "2004", "2005"}

LAUNCHER = """
    import subprocess, sys
    child = subprocess.Popen(sys.argv[1:])
    print(child.pid, flush=True)
    child.wait()
"""
# The spawning thread exits at once; the process lives until its stdin closes, then exits
# without waiting for tether run.
THREADED = """
    import subprocess, sys, threading
    started = []
    spawner = threading.Thread(target=lambda: started.append(subprocess.Popen(sys.argv[1:])))
    spawner.start()
    spawner.join()
    print(started[0].pid, flush=True)
    sys.stdin.read()
"""
# Everything here ignores SIGTERM (bash's ignored trap is inherited), so the watcher's SIGKILL
# after the grace is what ends it.
TREE = """
    trap '' TERM
    sleep 2000 & setsid sleep 2001 & setsid sh -c 'sleep 2002 &' &
    nohup sleep 2003 >/dev/null 2>&1 &
    env -i /usr/bin/setsid /bin/sleep 2004 &
    echo ready > "$0"; wait
"""


@pytest.fixture(autouse=True)
def settled(orphans_settled: None) -> Iterator[None]:
    """tether run, its watcher and CMD's tree are orphaned here when the launcher dies."""
    yield
    for process in sleepers(SLEEPS):
        process.kill()


async def test_the_parent_s_death_stops_cmd_s_whole_tree(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    launcher = subprocess.Popen(
        python(LAUNCHER, *RUN, "--", "bash", "-c", TREE, str(ready)), stdout=subprocess.PIPE
    )
    assert launcher.stdout is not None
    run = psutil.Process(int(launcher.stdout.readline()))
    launcher.stdout.close()
    await wait_until(lambda: ready.exists() and len(sleepers(SLEEPS)) == 5, timeout=20)
    found = sleepers(SLEEPS)
    launcher.kill()
    launcher.wait()
    killed = time.monotonic()
    await wait_until(lambda: not any(map(alive, found)), timeout=2 * GRACE + 1 + HEADROOM)
    took = time.monotonic() - killed
    assert took > GRACE - 0.05, "each of them ignores SIGTERM: the SIGKILL comes after the grace"
    await wait_until(lambda: not alive(run), timeout=HEADROOM)  # CMD ended: so does tether run


async def test_a_spawning_thread_s_exit_is_not_the_parent_s_death() -> None:
    launcher = subprocess.Popen(
        python(THREADED, *RUN, "--", "sleep", "2005"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert launcher.stdin is not None
    assert launcher.stdout is not None
    run = psutil.Process(int(launcher.stdout.readline()))
    launcher.stdout.close()
    await wait_until(lambda: len(sleepers(SLEEPS)) == 1, timeout=20)
    (sleeper,) = sleepers(SLEEPS)
    # Had the thread's exit been taken for a death, the sleep (which obeys SIGTERM) would be
    # gone within milliseconds of the watcher's answer: watch it for longer than a stop takes.
    await trio.sleep(2 * GRACE + 1)
    assert alive(sleeper)
    assert alive(run)
    launcher.stdin.close()  # now the process itself ends
    launcher.wait(timeout=20)
    await wait_until(lambda: not alive(sleeper) and not alive(run), timeout=GRACE + 1 + HEADROOM)


def test_the_mcp_page_s_config_runs() -> None:
    """The config's command line, with the server replaced by one that exits 7."""
    config = json.loads(block("docs/mcp.md", 1))
    (server,) = config["mcpServers"].values()
    assert server["command"] == "tether"
    options = server["args"][: server["args"].index("--") + 1]
    assert options == ["run", "--die-with-parent", "--"]
    command = [sys.executable, "-m", "tether", *options, "sh", "-c", "exit 7"]
    assert subprocess.run(command, timeout=60, check=False).returncode == 7
