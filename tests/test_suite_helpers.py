"""The suite's own clean-up does what its tests rely on: real processes, real kills."""

from __future__ import annotations

import os
import subprocess

from helpers import descendants, gone_since, kill_marked, marked, unique_session, wait_until


async def test_kill_marked_also_kills_what_is_forked_while_it_kills() -> None:
    """A marked shell forking a child every few milliseconds: one look and its kills leave the
    children forked between them; ``kill_marked`` looks again until none is left."""
    session = unique_session()
    before = descendants()
    forker = subprocess.Popen(
        ["sh", "-c", "while :; do sleep 600 & sleep 0.002; done"],
        env={**os.environ, "TETHER_SESSION": session},
    )
    try:
        await wait_until(lambda: len(marked(session)) >= 20, timeout=30)
        kill_marked(session)
        assert marked(session) == []
    finally:
        forker.kill()
        forker.wait()
        await wait_until(lambda: gone_since(before), timeout=30)
