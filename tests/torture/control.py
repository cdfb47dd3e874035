"""The deadlock detector's negative control (issue 31): seeded working programs, each with
tasks waiting on a gate that something outside the waiting tasks opens later (a thread, a
pool, a queue-fed worker, a weak callback registry, a thread blocked on a primitive that a
thread or a task releases, a module registry a thread reads, a signal, a subprocess, a socket,
a busy loop, the autojump clock), run under the plugin; every one must pass. A failure is a false
alarm, printed with its seed and program.

``python tests/torture/control.py --seeds N --programs M`` runs it alone; ``make torture``
runs it, and ``tests/test_testing_soundness.py`` runs a bounded slice.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

INI = """[pytest]
trio_mode = true
tether_deadlock = true
tether_deadlock_cushion = 0.1
tether_timeout = 60
"""

HEADER = """import concurrent.futures, os, queue, signal, socket, threading, time, weakref
import pytest, trio, tether

class Registry:
    def __init__(self):
        self.callbacks = []
    def register(self, method):
        self.callbacks.append(weakref.WeakMethod(method))
    def fire(self):
        for ref in self.callbacks:
            method = ref()
            if method is not None:
                method()

PENDING = {}


class Opener:
    def __init__(self, open_gate, token):
        self.open_gate, self.token = open_gate, token
    def on_fire(self):
        trio.from_thread.run(self.open_gate, trio_token=self.token)
"""

# name -> (setup, one waiter's body, the opener's body); W is the number of waiters.
GATES = {
    "event": ("gate = trio.Event()", "await gate.wait()", "gate.set()"),
    "semaphore": (
        "gate = trio.Semaphore(0)",
        "await gate.acquire()",
        "for _ in range(W):\n    gate.release()",
    ),
    "memory": (
        "send, receive = trio.open_memory_channel(0)",
        "await receive.receive()",
        "for _ in range(W):\n    await send.send(1)",
    ),
    "condition": (
        "gate = trio.Condition()\nstate = {'open': False}",
        "async with gate:\n    while not state['open']:\n        await gate.wait()",
        "async with gate:\n    state['open'] = True\n    gate.notify_all()",
    ),
    "tether": (
        "send, receive = tether.channel(int, 1, name='gate')\nholder = [send]",
        "async for _ in receive:\n    pass",
        "holder.pop().close()",
    ),
}
SINGLE = {"tether"}
"""Gates with one waiter only (a tether receiver is not cloned)."""

# name -> the lines that start the waker inside the nursery ``n``; D is its delay.
WAKERS = {
    "thread": """def later():
    time.sleep(D)
    trio.from_thread.run(open_gate, trio_token=token)
threading.Thread(target=later, daemon=True).start()""",
    "pool": """def job(fn):
    time.sleep(D)
    trio.from_thread.run(fn, trio_token=token)
pool = concurrent.futures.ThreadPoolExecutor(1)
pool.submit(job, open_gate)
pool.shutdown(wait=False)""",
    "queue": """jobs = queue.Queue()
def worker():
    fn = jobs.get()
    time.sleep(D)
    trio.from_thread.run(fn, trio_token=token)
threading.Thread(target=worker, daemon=True).start()
jobs.put(open_gate)""",
    "weak": """registry = Registry()
opener = Opener(open_gate, token)
registry.register(opener.on_fire)
def fire(registry):
    time.sleep(D)
    registry.fire()
threading.Thread(target=fire, args=(registry,), daemon=True).start()
del registry""",
    "to_thread": """async def via_thread():
    await trio.to_thread.run_sync(time.sleep, D)
    await open_gate()
n.start_soon(via_thread)""",
    "from_thread": """def in_thread():
    time.sleep(D)
    trio.from_thread.run(open_gate)
async def via_worker():
    await trio.to_thread.run_sync(in_thread)
n.start_soon(via_worker)""",
    "signal": """async def send_later():
    await trio.run_process(["sh", "-c", f"sleep {D}; kill -USR2 {os.getpid()}"])
async def on_signal():
    with trio.open_signal_receiver(signal.SIGUSR2) as signals:
        n.start_soon(send_later)
        async for _ in signals:
            await open_gate()
            return
n.start_soon(on_signal)""",
    "subprocess": """async def after_process():
    await trio.run_process(["sleep", str(D)])
    await open_gate()
n.start_soon(after_process)""",
    "socket": """a, b = socket.socketpair()
def write_later():
    time.sleep(D)
    b.send(b"x")
async def read_then_open():
    with trio.socket.from_stdlib_socket(a) as s:
        await s.recv(1)
    b.close()
    await open_gate()
threading.Thread(target=write_later, daemon=True).start()
n.start_soon(read_then_open)""",
    "blocked_thread": """relay = threading.Event()
def set_later():
    time.sleep(D)
    relay.set()
threading.Thread(target=set_later, daemon=True).start()
async def after_relay():
    await trio.to_thread.run_sync(relay.wait, abandon_on_cancel=True)
    await open_gate()
n.start_soon(after_relay)""",
    "fed_queue": """box = queue.Queue()
def consume():
    fn = box.get()
    trio.from_thread.run(fn, trio_token=token)
threading.Thread(target=consume, daemon=True).start()
async def feed():
    await trio.sleep(D)
    box.put(open_gate)
n.start_soon(feed)""",
    "locked_registry": """lock = threading.Lock()
lock.acquire()
PENDING[id(lock)] = open_gate
def after_lock():
    with lock:
        pass
    trio.from_thread.run(PENDING.pop(id(lock)), trio_token=token)
threading.Thread(target=after_lock, daemon=True).start()
async def release():
    await trio.sleep(D)
    lock.release()
n.start_soon(release)""",
    "busy": """async def busy():
    deadline = trio.current_time() + D
    while trio.current_time() < deadline:
        await trio.sleep(0)
    await open_gate()
n.start_soon(busy)""",
    "autojump": """async def after_sleep():
    await trio.sleep(3600)
    await open_gate()
n.start_soon(after_sleep)""",
}


def program(rng: random.Random, index: int) -> str:
    """One generated test: its waiters, its gate and its waker, from ``rng``."""
    gate = rng.choice(sorted(GATES))
    waker = rng.choice(sorted(WAKERS))
    waiters = 1 if gate in SINGLE else rng.choice([1, 3, 20, 200])
    delay = round(rng.uniform(0.4, 0.9), 2)
    setup, wait, opener = GATES[gate]
    fixture = "autojump_clock" if waker == "autojump" else ""
    body = "\n".join([
        setup,
        f"W, D = {waiters}, {delay}",
        "token = trio.lowlevel.current_trio_token()",
        "async def waiter():\n" + textwrap.indent(wait, "    "),
        "async def open_gate():\n" + textwrap.indent(opener, "    "),
        "async with trio.open_nursery() as n:",
        "    for _ in range(W):\n        n.start_soon(waiter, name='waiter')",
        textwrap.indent(WAKERS[waker], "    "),
    ])  # fmt: skip
    return (f"async def test_{index}_{gate}_woken_by_{waker}({fixture}):\n"
            + textwrap.indent(body, "    ") + "\n")  # fmt: skip


def source(seed: int, programs: int) -> str:
    """The test file of ``programs`` generated tests for ``seed``."""
    rng = random.Random(seed)
    return HEADER + "\n\n" + "\n\n".join(program(rng, i) for i in range(programs))


def run(seed: int, programs: int, directory: Path) -> subprocess.CompletedProcess[str]:
    """Run one seed's programs under the plugin in a fresh pytest, in ``directory``."""
    (directory / "pytest.ini").write_text(INI)
    (directory / f"test_control_{seed}.py").write_text(source(seed, programs))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=directory, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--programs", type=int, default=12)
    parser.add_argument("--first", type=int, default=1)
    args = parser.parse_args()
    failed = []
    for seed in range(args.first, args.first + args.seeds):
        with tempfile.TemporaryDirectory() as directory:
            done = run(seed, args.programs, Path(directory))
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"
        print(f"seed {seed}: {summary}", flush=True)
        if done.returncode != 0:
            failed.append(seed)
            print(done.stdout[-4000:], done.stderr[-2000:])
    print(f"false alarms: {len(failed)} seeds failed {failed}" if failed else "no false alarm")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
