"""Incident 000 end to end: SIGTERM mid tool call, with a real daemon and a real harness.

agentd starts ``python -m tether.harness.example`` and delivers a prompt; its engine runs a
child agent (which starts a ``setsid`` grandchild) through ``ctx.tool``. A separate process
sends the harness SIGTERM. Shown: the sender by pid and command line, the call sealed
``interrupted`` naming it, nothing of the old harness left, a respawn with a new epoch, and the
resumed engine answering the next prompt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import trio

from ..journal import Message, ToolCall, ToolResult, scan
from ..process import find_twins, start
from ..wire import Prompt
from ._demo_daemon import demo_agentd, show_events, sleeper_running
from ._timeline import Timeline, Verdict

SESSION = "incident-000"


def _entries(path: Path) -> list[object]:
    return list(scan(path.read_bytes()).entries) if path.exists() else []


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Bounded polling: the harness leaves only files and processes to watch.

    Raises:
        TimeoutError: naming ``what`` did not happen within 20 s.
    """
    with trio.move_on_after(20):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.02)
        return
    raise TimeoutError(f"waited 20 s for {what}")


async def replay_sigterm(
    log: Timeline, root: Path, *, tag: str = "000", env: dict[str, str] | None = None
) -> list[Verdict]:
    """The scenario (in ``root / tag``, its harnesses given ``env``); its verdicts."""
    directory = root / tag
    directory.mkdir(mode=0o700)
    transcript = directory / "sessions" / SESSION / f"{SESSION}.jsonl"
    async with demo_agentd(directory, env=env) as agentd, trio.open_nursery() as nursery:
        nursery.start_soon(show_events, log, agentd.subscribe())
        first = await agentd.deliver(SESSION, "run the test suite")
        await _until(
            lambda: (
                any(isinstance(e, ToolCall) for e in _entries(transcript))
                and sleeper_running(agentd, SESSION, first.epoch)
            ),
            "the agent and its setsid grandchild",
        )
        tree = len(find_twins(SESSION, epoch=first.epoch, store=agentd.store_id))
        log.event("harness", f"tool call running: harness, agent and setsid grandchild ({tree})")
        # The sender stays alive (sleeping) so the harness can read its command line.
        killer = await start(["sh", "-c", 'kill -TERM "$0"; sleep 600', str(first.pid)])
        log.event("operator", f"pid {killer.pid} (sh -c kill) sends SIGTERM to pid {first.pid}")
        await _until(lambda: agentd.status()[0].pid is None, "the harness's exit")
        await killer.stop(0.2)
        harness_log = (directory / "sessions" / SESSION / "harness.log").read_text()
        heard = re.search(r"received SIGTERM from pid=(\d+) uid=\d+ cmd=(.*)", harness_log)
        sealed = [e for e in _entries(transcript) if isinstance(e, ToolResult)]
        for result in sealed:
            log.event("transcript", f"{result.status}: {result.reason}")
        await _until(
            lambda: not find_twins(SESSION, epoch=first.epoch, store=agentd.store_id),
            "the old tree's end",
        )
        started = time.perf_counter()
        second = await agentd.deliver(SESSION, Prompt("p2", "now continue", {"steps": 3}))
        await _until(
            lambda: any(
                isinstance(e, Message) and e.role == "assistant" for e in _entries(transcript)
            ),
            "the answer",
        )
        answered = time.perf_counter() - started
        log.event("transcript", f"the resumed engine answered in {answered:.2f} s")
        nursery.cancel_scope.cancel()
    dangling = {e.id for e in _entries(transcript) if isinstance(e, ToolCall)} - {
        e.call_id for e in _entries(transcript) if isinstance(e, ToolResult)
    }
    named = heard is not None and int(heard.group(1)) == killer.pid
    interrupted = [r for r in sealed if r.status == "interrupted"]
    return [
        Verdict(
            "the SIGTERM's sender is named by pid and command line",
            named,
            f"pid={heard.group(1)} cmd={heard.group(2)[:24]}" if heard else "not logged",
        ),
        Verdict(
            "the interrupted call is sealed interrupted, naming the sender",
            len(interrupted) == 1
            and f"SIGTERM from pid {killer.pid}" in (interrupted[0].reason or "")
            and not dangling,
            f"{len(interrupted)} interrupted, {len(dangling)} dangling",
        ),
        Verdict(
            "nothing of the old harness survives",
            not find_twins(SESSION, epoch=first.epoch, store=agentd.store_id),
            f"{tree} processes before, 0 after",
        ),
        Verdict(
            "agentd respawns the session with a new epoch",
            second.epoch > first.epoch and second.pid != first.pid,
            f"epoch {first.epoch} -> {second.epoch}",
        ),
        Verdict(
            "the resumed engine answers the next prompt",
            second.attempts == 1,
            f"{answered:.2f} s, attempt {second.attempts}",
        ),
    ]
