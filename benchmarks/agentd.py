"""What agentd costs, in one run: reattach, phantom replacement, spawn, and 200 idle sessions.

Run with ``make bench`` (or ``python benchmarks/agentd.py [--sessions N]``).

- reattach: ``start_agent`` on a warm, healthy session (one ping round trip and a ``Nudge``)
  against the floor of one bare ``Ping``/``Pong`` round trip over ``tether.wire`` to a peer
  process that only echoes.
- phantom: ``start_agent`` right after the harness froze its whole process (the example
  harness's wedge switch), until a fresh harness has said hello; the target is ``miss_limit x
  heartbeat + 0.5 s``. A frozen harness reads no signals, so its stop always takes the SIGKILL
  step: ``2 x grace`` of it is the escalation policy, not the daemon.
- spawn: ``start_agent`` on a new session (bump, spawn, hello) against the floor of starting
  the harness's interpreter and importing the harness module, in the same run.
- 200 sessions: a daemon with N attached harnesses (a minimal harness that speaks the wire,
  answers pings and beats, so the machine can hold them all) and a 1 s heartbeat: the
  daemon's own CPU share of one core and its RSS over 10 heartbeats; target under 5 %.
- the fleet (``fleet.py``, ``--fleet N``, 1,000 by default): CPU, RSS and ``ps`` with N
  sessions on one daemon.
- load (issue 15): ``tether agentd`` in its own process with real harnesses
  (``load_harness.py``: ``run_harness``, an engine that records each prompt durably), 200
  sessions started 10 at a time, then 2,000 sends at once through the socket; against a control
  of 20 sessions and 1,000 sends in the same run. Every prompt must be delivered, each engine
  must have seen each of its prompts (once, in the common case), and no healthy harness may be
  called a phantom. Then the daemon is stopped (SIGSTOP) for 8 s and continued: 0 harnesses
  may die of it. Reports the time to deliver all, and the daemon's peak CPU and RSS.

Prints a markdown table of ratios (tether / reference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio

from tether import Agentd, SqliteEpochStore, wire

HERE = Path(__file__).parent

EXAMPLE = [sys.executable, "-m", "tether.harness.example"]

# A harness in 30 lines: hello, then answer every ping, and beat every heartbeat for a daemon
# of revision 3; exit 75 when superseded.
MINI = r"""
import json, os, socket, struct, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["TETHER_AGENTD"])
def send(obj):
    body = json.dumps(obj).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
def recv():
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk: sys.exit(69)
        head += chunk
        s.settimeout(None)  # the frame has begun: read it whole
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    return json.loads(body)
if "TETHER_SESSION" in os.environ:  # without it: an echo, the floor of a round trip
    send({"type": "hello", "session": os.environ["TETHER_SESSION"],
          "epoch": int(os.environ["TETHER_EPOCH"]), "pid": os.getpid(), "create_time": 0.0})
modes = {"idle": {"kind": "idle"}, "": {}, "turn": {"kind": "turn", "name": "model-a",
         "age": 12.5, "silence": 0.25, "threshold": 40.0, "source": "quantile"}}
switch = os.environ.get("TETHER_BENCH_MODE_FILE")  # what each pong says the engine does
def pong(seq):
    mode = open(switch).read().strip() if switch else ""
    send({"type": "pong", "seq": seq, **modes[mode]})
every, beat = None, None
while True:
    s.settimeout(None if beat is None else max(0.0, beat - time.monotonic()))
    try:
        m = recv()
    except socket.timeout:  # only ever between frames
        pong(0)
        beat = (time.monotonic() // every + 1) * every
        continue
    if m["type"] == "welcome" and m.get("revision", 1) >= 3:
        every = m["heartbeat"]
        beat = (time.monotonic() // every + 1) * every
    elif m["type"] == "ping": pong(m["seq"])
    elif m["type"] == "superseded": sys.exit(75)
"""


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


async def reattach(workdir: Path, rounds: int) -> tuple[list[float], list[float]]:
    async with SqliteEpochStore(workdir / "epochs.sqlite3") as store:
        agentd = Agentd(store, workdir / "agentd.sock", EXAMPLE, heartbeat=1.0)
        async with agentd.running(stop_harnesses=True):
            await agentd.start_agent("warm")
            ours = []
            for _ in range(rounds):
                started = time.perf_counter()
                await agentd.start_agent("warm")
                ours.append(time.perf_counter() - started)
    floor = []
    socket_path = workdir / "echo.sock"
    ready = trio.Event()
    done = trio.Event()

    async def ping_pong(connection: wire.Connection) -> None:
        ready.set()
        for seq in range(1, rounds + 1):
            started = time.perf_counter()
            await connection.send(wire.Ping(seq))
            await connection.receive()
            floor.append(time.perf_counter() - started)
        done.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(wire.serve, socket_path, ping_pong)
        echo = await trio.lowlevel.open_process(
            [sys.executable, "-c", MINI],
            env={
                **{k: v for k, v in os.environ.items() if k != "TETHER_SESSION"},
                "TETHER_AGENTD": str(socket_path),
            },
        )
        await done.wait()
        echo.kill()
        await echo.wait()
        nursery.cancel_scope.cancel()
    return ours, floor


async def phantom_and_spawn(workdir: Path, cycles: int) -> tuple[list[float], list[float], float]:
    heartbeat, miss, grace = 0.2, 3, 0.1
    env = {**os.environ, "TETHER_EXAMPLE_WEDGE_FILE": str(workdir / "wedge")}
    phantoms, spawns = [], []
    async with SqliteEpochStore(workdir / "epochs.sqlite3") as store:
        agentd = Agentd(
            store,
            workdir / "agentd.sock",
            EXAMPLE,
            heartbeat=heartbeat,
            miss_limit=miss,
            grace=grace,
            env=env,
            restart_limit=(cycles + 1, 60.0),
        )
        async with agentd.running(stop_harnesses=True):
            for cycle in range(cycles):
                started = time.perf_counter()
                await agentd.start_agent(f"fresh-{cycle}")
                spawns.append(time.perf_counter() - started)
                await agentd.stop_agent(f"fresh-{cycle}")
            await agentd.start_agent("phantom")
            for _ in range(cycles):
                (workdir / "wedge").touch()
                while (workdir / "wedge").exists():
                    await trio.sleep(0.005)
                started = time.perf_counter()
                attached = await agentd.start_agent("phantom")  # agentd may have respawned it
                assert attached.how in ("respawned", "reattached"), attached
                phantoms.append(time.perf_counter() - started)
    return phantoms, spawns, miss * heartbeat


def interpreter_floor(cycles: int) -> list[float]:
    floor = []
    for _ in range(cycles):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tether.harness.example"], check=True)
        floor.append(time.perf_counter() - started)
    return floor


async def start_sessions(agentd: Agentd, count: int, prefix: str = "s") -> None:
    """Start sessions ``{prefix}0`` to ``{prefix}{count-1}``, 16 at a time."""
    limit = trio.CapacityLimiter(16)

    async def start(index: int) -> None:
        async with limit:
            await agentd.start_agent(f"{prefix}{index}")

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(start, index)


async def many_sessions(workdir: Path, count: int) -> tuple[float, float]:
    async with SqliteEpochStore(workdir / "epochs.sqlite3") as store:
        agentd = Agentd(store, workdir / "agentd.sock", [sys.executable, "-c", MINI], heartbeat=1.0)
        async with agentd.running(stop_harnesses=True):
            await start_sessions(agentd, count)
            assert len(agentd.attached()) == count
            await trio.sleep(2.0)  # let the spawning settle
            me = psutil.Process()
            before = me.cpu_times()
            started = time.perf_counter()
            await trio.sleep(10.0)
            after = me.cpu_times()
            wall = time.perf_counter() - started
            cpu = (after.user - before.user) + (after.system - before.system)
            assert len(agentd.attached()) == count, "a harness was lost while idle"
            rss = me.memory_info().rss / 2**20
    return cpu / wall, rss


async def activity_cost(workdir: Path, count: int, windows: int = 8) -> tuple[float, float]:
    """The daemon's CPU share with ``count`` attached harnesses whose pongs say ``turn`` and
    the same harnesses saying ``idle``: one daemon, the two alternating in 5 s windows (so
    spawning and load drift affect both alike)."""
    switch = workdir / "mode"
    switch.write_text("idle")
    env = {**os.environ, "TETHER_BENCH_MODE_FILE": str(switch)}
    shares: dict[str, list[float]] = {"idle": [], "turn": []}
    async with SqliteEpochStore(workdir / "epochs.sqlite3") as store:
        agentd = Agentd(
            store, workdir / "agentd.sock", [sys.executable, "-c", MINI], heartbeat=1.0, env=env
        )
        async with agentd.running(stop_harnesses=True):
            await start_sessions(agentd, count)
            await trio.sleep(2.0)
            me = psutil.Process()
            for window in range(windows):
                mode = ("idle", "turn")[window % 2]
                switch.write_text(mode)
                await trio.sleep(1.5)  # every harness has answered a ping in this mode
                before, started = me.cpu_times(), time.perf_counter()
                await trio.sleep(5.0)
                after, wall = me.cpu_times(), time.perf_counter() - started
                used = (after.user - before.user) + (after.system - before.system)
                shares[mode].append(used / wall)
            busy = [r for r in agentd.status() if r.activity.startswith("turn")]
            assert len(busy) == count or mode != "turn", "the turns were not reported"
    return statistics.mean(shares["turn"]), statistics.mean(shares["idle"])


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--load-sessions", type=int, default=200)
    parser.add_argument("--load-sends", type=int, default=2000)
    parser.add_argument("--stop-for", type=float, default=8.0)
    parser.add_argument("--load-only", action="store_true", help="only the load run")
    parser.add_argument("--no-load", action="store_true", help="skip the load run")
    parser.add_argument("--fleet", type=int, default=1000, help="fleet size (0: skip it)")
    args = parser.parse_args()
    if not args.no_load:
        from agentd_load import load, print_load

        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            base.chmod(0o700)
            runs = [
                await load(base / "control", 20, 1000, args.stop_for),
                await load(base / "load", args.load_sessions, args.load_sends, args.stop_for),
            ]
        print_load(runs)
        if args.load_only:
            return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o700)
        for name in ("a", "b", "c"):
            (base / name).mkdir(mode=0o700)
        ours, floor = await reattach(base / "a", args.rounds)
        (ours_median, ours_p99), (floor_median, floor_p99) = quantiles(ours), quantiles(floor)
        rows.append(
            ("reattach, median (target < 5 ms)", ours_median, floor_median, "bare ping round trip")
        )
        rows.append(("reattach, p99", ours_p99, floor_p99, "bare ping round trip"))
        phantoms, spawns, patience = await phantom_and_spawn(base / "b", args.cycles)
        interpreter = interpreter_floor(args.cycles)
        rows.append(
            (
                "phantom to fresh, median (target patience + 0.5 s)",
                statistics.median(phantoms),
                patience + 0.5,
                f"patience {patience:.1f} s + 0.5 s",
            )
        )
        rows.append(("phantom to fresh, max", max(phantoms), patience + 0.5, "the same target"))
        rows.append(
            (
                "spawn to hello, median",
                statistics.median(spawns),
                statistics.median(interpreter),
                "start the interpreter, import the harness",
            )
        )
        share, rss = await many_sessions(base / "c", args.sessions)
        (base / "d").mkdir(mode=0o700)
        busy, idle = await activity_cost(base / "d", args.sessions)
    print(f"agentd, {args.sessions} sessions; {args.rounds} reattaches; {args.cycles} cycles\n")
    print("| measure | tether | reference | ratio | reference is |")
    print("| --- | --- | --- | --- | --- |")
    for name, value, reference, what in rows:
        print(
            f"| {name} | {value * 1e3:.2f} ms | {reference * 1e3:.2f} ms "
            f"| {value / reference:.2f}x | {what} |"
        )
    print(
        f"| daemon CPU, {args.sessions} sessions, 1 s heartbeat | {share * 100:.2f} % of a core "
        f"| 5 % | {share / 0.05:.2f}x | the target |"
    )
    print(f"| daemon RSS, {args.sessions} sessions | {rss:.0f} MiB | - | - | - |")
    print(
        f"| daemon CPU, {args.sessions} sessions in turns reporting (target <= 1.2x idle)"
        f" | {busy * 100:.2f} % | {idle * 100:.2f} % | {busy / idle:.2f}x"
        " | the same sessions reporting idle |"
    )
    if args.fleet:
        from fleet import measure

        print(f"\nagentd fleet: {args.fleet:,} attached sessions on one daemon\n")
        print("| measure | tether | reference | ratio |\n| --- | --- | --- | --- |")
        print("\n".join(await measure(args.fleet, None)))


if __name__ == "__main__":
    trio.run(main)
