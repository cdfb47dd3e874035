"""agentd under load (issue 15), the load run of ``agentd.py``: ``tether agentd`` in its own
process with real harnesses (``load_harness.py``), many sessions started, a burst of sends
through the socket, then the daemon SIGSTOPped and continued. See ``agentd.py``'s docstring.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import psutil
import trio

from tether.agentd._client import request
from tether.journal import scan

HERE = Path(__file__).parent


@attrs.frozen
class Load:
    sessions: int
    sends: int
    start_seconds: float
    deliver_seconds: float
    delivered: int
    seen: int
    """Prompts the engines recorded (each prompt text at least once)."""
    duplicates: int
    """Prompts an engine recorded more than once."""
    phantoms: int
    phantoms_after_stop: int
    harnesses_lost_to_stop: int
    peak_cpu: float
    """The daemon's highest CPU share of one core over any 1 s window."""
    peak_rss: float
    """MiB."""


async def load(workdir: Path, sessions: int, sends: int, stop_for: float) -> Load:
    """One ``tether agentd`` process under load; see the module's docstring."""
    workdir.mkdir(mode=0o700)
    sock = workdir / "agentd.sock"
    log = open(workdir / "agentd.log", "wb")  # noqa: SIM115, ASYNC230
    daemon = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in a thread
        [sys.executable, "-m", "tether", "agentd", "--socket", str(sock), "--heartbeat", "1",
         "--stop-harnesses", "--", sys.executable, str(HERE / "load_harness.py")],
        stdout=log, stderr=log,
    )  # fmt: skip
    watched = psutil.Process(daemon.pid)
    samples: list[tuple[float, float]] = []
    peak_rss = 0.0

    async def sample() -> None:
        nonlocal peak_rss
        while True:
            times = watched.cpu_times()
            samples.append((time.monotonic(), times.user + times.system))
            peak_rss = max(peak_rss, watched.memory_info().rss / 2**20)
            await trio.sleep(0.2)

    names = [f"load-{i:03}" for i in range(sessions)]
    try:
        while not sock.exists():
            await trio.sleep(0.05)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            started = time.monotonic()
            for i in range(0, sessions, 10):
                async with trio.open_nursery() as batch:
                    for name in names[i : i + 10]:
                        batch.start_soon(request, str(sock), "start", name)
            start_seconds = time.monotonic() - started
            delivered: list[str] = []

            async def send(n: int) -> None:
                answer = await request(str(sock), "send", names[n % sessions], f"prompt-{n}")
                delivered.append(answer["prompt_id"])

            started = time.monotonic()
            async with trio.open_nursery() as burst:
                for n in range(sends):
                    burst.start_soon(send, n)
            deliver_seconds = time.monotonic() - started
            phantoms = _count(workdir, "phantom")
            pids = {name: _pid(row) for name, row in _rows(await request(str(sock), "ps"))}
            os.kill(daemon.pid, signal.SIGSTOP)
            await trio.sleep(stop_for)
            os.kill(daemon.pid, signal.SIGCONT)
            await trio.sleep(3.0)  # three heartbeats awake: each tick could judge
            after = {name: _pid(row) for name, row in _rows(await request(str(sock), "ps"))}
            lost = sum(after.get(name) != pid for name, pid in pids.items())
            phantoms_after = _count(workdir, "phantom") - phantoms
            nursery.cancel_scope.cancel()
    finally:
        daemon.send_signal(signal.SIGTERM)
        await trio.to_thread.run_sync(daemon.wait)
        log.close()
    seen: dict[str, int] = {}
    for name in names:
        path = workdir / name / f"{name}.jsonl"
        for entry in scan(path.read_bytes()).entries if path.exists() else []:
            text = getattr(entry, "content", None)
            if isinstance(text, str) and text.startswith("prompt-"):
                seen[text] = seen.get(text, 0) + 1
    peak = 0.0
    for i, (at, cpu) in enumerate(samples):
        for later_at, later_cpu in samples[i + 1 :]:
            if later_at - at >= 1.0:
                peak = max(peak, (later_cpu - cpu) / (later_at - at))
                break
    return Load(
        sessions, sends, start_seconds, deliver_seconds, len(delivered), len(seen),
        sum(count > 1 for count in seen.values()), phantoms, phantoms_after, lost, peak, peak_rss,
    )  # fmt: skip


def _rows(result: dict[str, object]) -> list[tuple[str, dict[str, object]]]:
    rows = result["sessions"]
    assert isinstance(rows, list)
    return [(row["session"], row) for row in rows]


def _pid(row: dict[str, object]) -> object:
    return row["pid"]


def _count(workdir: Path, kind: str) -> int:
    path = workdir / "agentd.events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(json.loads(line)["kind"] == kind for line in lines)


def print_load(runs: list[Load]) -> None:
    print("\nagentd under load (issue 15): one daemon process, real harnesses\n")
    print(
        "| run | sessions | sends | start all | deliver all | delivered | engines saw"
        " | seen twice | phantoms | phantoms after an 8 s SIGSTOP | harnesses lost to it"
        " | peak CPU | peak RSS |"
    )
    print("| --- " * 13 + "|")
    for run, name in zip(runs, ("control", "load"), strict=True):
        print(
            f"| {name} | {run.sessions} | {run.sends} | {run.start_seconds:.1f} s"
            f" | {run.deliver_seconds:.1f} s | {run.delivered} | {run.seen} | {run.duplicates}"
            f" | {run.phantoms} | {run.phantoms_after_stop} | {run.harnesses_lost_to_stop}"
            f" | {run.peak_cpu * 100:.0f} % | {run.peak_rss:.0f} MiB |"
        )
    control, heavy = runs
    per_heavy = heavy.deliver_seconds / heavy.sends
    per_control = control.deliver_seconds / control.sends
    print("\n| measure | tether | reference | ratio |\n| --- | --- | --- | --- |")
    print(
        f"| time per delivered prompt, load / control | {per_heavy * 1e3:.2f} ms"
        f" | {per_control * 1e3:.2f} ms | {per_heavy / per_control:.2f}x |"
    )
