"""Seeds 000 and 004 again, with every harness under ``asyncio.run``: the example harness run
with ``TETHER_EXAMPLE_BACKEND=asyncio`` (``run_harness(engine, backend="asyncio")``), the same
daemon, the same verdicts. SIGTERM mid tool call names its sender and seals the call, and the
resumed engine answers; a Superseded harness exits 75 with or without a stray sender clone, its
child agent SIGINTed and its clone's line named.
"""

from __future__ import annotations

from pathlib import Path

from ._incident_000 import replay_sigterm
from ._incident_004 import supersede, superseded_verdicts
from ._timeline import Timeline, Verdict

ASYNCIO = {"TETHER_EXAMPLE_BACKEND": "asyncio"}


async def replay_on_asyncio(log: Timeline, root: Path) -> list[Verdict]:
    """The scenario; its verdicts."""
    verdicts = await replay_sigterm(log, root, tag="000-asyncio", env=ASYNCIO)
    plain_dir, stray_dir = root / "004-asyncio-a", root / "004-asyncio-b"
    for directory in (plain_dir, stray_dir):
        directory.mkdir(mode=0o700)
    with log.logs("tether.process"):
        plain = await supersede(log, plain_dir, stray=False, more=ASYNCIO)
        stray = await supersede(log, stray_dir, stray=True, more=ASYNCIO)
    return [*verdicts, *superseded_verdicts(plain, stray)]
