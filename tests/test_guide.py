"""The guide's 40-line harness runs as it is, under a real daemon."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import wait_until
from tether import Agentd, SqliteEpochStore

GUIDE = Path(__file__).parent.parent / "docs" / "guide.md"


async def test_the_guide_s_engine_answers_a_prompt(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)[0]
    assert len(code.splitlines()) <= 45
    engine = tmp_path / "engine.py"
    engine.write_text(code)
    tmp_path.chmod(0o700)
    async with SqliteEpochStore(tmp_path / "epochs.sqlite3") as store:
        agentd = Agentd(store, tmp_path / "agentd.sock", [sys.executable, str(engine)], grace=0.3)
        async with agentd.running(stop_harnesses=True):
            delivered = await agentd.deliver("guide", "fix the tests")
            transcript = tmp_path / "guide" / "guide.jsonl"
            await wait_until(lambda: "agent exited 0" in transcript.read_text())
    assert delivered.attempts == 1
    assert "engine up: session guide epoch 1" in (tmp_path / "guide" / "harness.log").read_text()
