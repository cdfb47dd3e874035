"""A harness that leaves thousands of processes behind (issue 40, row 4).

Run with ``make bench`` (or ``python benchmarks/sweep.py [--leftovers N]``).

``tether agentd`` runs in its own process with a harness that says hello, starts N
``setsid`` sleepers (each marked with the session, as a fork loop or a leaky ``make -j``
would leave them), and exits. The daemon must sweep all N while it keeps answering: a
``ps`` request goes to it every 20 ms throughout, and its slowest answer is reported.
Targets: every ``ps`` under 200 ms, all N gone within ``2 x grace + 5 s`` of the harness's
exit.

The reference, in the same run: psutil's own recipe for the same N marked processes
(``process_iter`` reading each environment, ``terminate``, ``wait_procs(timeout=grace)``,
``kill``), in a plain process with nothing else to serve.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from helpers import LEAVER
from tether.cli._request import request

GRACE = 1.0


def marked(session: str) -> list[psutil.Process]:
    """Live processes whose environment names ``session`` (the sleepers)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("TETHER_SESSION") == session:
                found.append(process)
        except psutil.Error:
            continue
    return found


def children(pid: int) -> set[int]:
    """``pid``'s children now, zombies included (from its threads' ``children`` files)."""
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(child) for child in f.read().split())
    return found


def wait_for(predicate: object, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def tether_sweep(n: int, tmp: Path) -> dict[str, float]:
    """Sweep time and the slowest ``ps`` answer of a daemon whose harness left ``n``."""
    socket_path = str(tmp / "agentd.sock")
    script = tmp / "leaver.py"
    script.write_text(LEAVER)
    done = tmp / "left"
    harness = [sys.executable, str(script), str(n), str(done)]
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "agentd", "--socket", socket_path,
         "--grace", str(GRACE), "--log-level", "error", "--", *harness],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    slowest = [0.0]
    stop = threading.Event()

    def poll_ps() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                request(socket_path, "ps", timeout=30)
            except Exception:  # noqa: BLE001 (not up yet, or gone at the end)
                pass
            else:
                slowest[0] = max(slowest[0], time.monotonic() - started)
            time.sleep(0.02)

    try:
        assert wait_for(lambda: os.path.exists(socket_path), 30), "agentd did not start"
        request(socket_path, "start", "bench", create=True, timeout=30)
        assert wait_for(done.exists, 120), "the harness did not leave its processes"
        left_at = time.monotonic()
        poller = threading.Thread(target=poll_ps)
        poller.start()
        # The sleepers are the daemon's children now (it is a subreaper): they are gone when
        # it has none left. Cheap to read, so the `ps` poller has the interpreter to itself.
        gone = wait_for(lambda: not children(daemon.pid), 300)
        swept = time.monotonic() - left_at
        stop.set()
        poller.join()
        return {"sweep": swept if gone else float("inf"), "ps": slowest[0]}
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        for process in marked("bench"):
            process.kill()


def psutil_sweep(n: int) -> float:
    """The same sweep with psutil's recipe, nothing else running."""
    env = {**os.environ, "TETHER_SESSION": "reference"}
    for _ in range(n):
        subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
    started = time.monotonic()
    found = marked("reference")
    for process in found:
        process.terminate()
    _, alive = psutil.wait_procs(found, timeout=GRACE)
    for process in alive:
        process.kill()
    psutil.wait_procs(alive, timeout=GRACE)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leftovers", type=int, default=2000)
    args = parser.parse_args()
    n = args.leftovers
    with tempfile.TemporaryDirectory(prefix="tether-sweep-") as tmp:
        os.chmod(tmp, 0o700)
        ours = tether_sweep(n, Path(tmp))
    reference = psutil_sweep(n)
    bound = 2 * GRACE + 5
    print(f"\n## A harness leaves {n} processes (grace {GRACE:g} s)\n")
    print("| measure | tether | psutil recipe | tether / psutil | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| all {n} gone (s) | {ours['sweep']:.2f} | {reference:.2f} | "
          f"{ours['sweep'] / reference:.2f}x | under {bound:g} s |")  # fmt: skip
    print(f"| slowest `ps` during the sweep (ms) | {ours['ps'] * 1000:.0f} | | | under 200 ms |")
    ok = ours["sweep"] <= bound and ours["ps"] < 0.2
    print(f"\ntargets {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
