"""The nemesis's faults to what the daemon stands on: its store (locked, copied), its disk
(filled), its descriptors (exhausted) and its socket (half-written frames, garbage). Each is
undone by a task of its own while the campaign goes on."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

import trio

from torture.world import World

LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
db.execute("CREATE TABLE IF NOT EXISTS torture_lock (x)")
db.execute("INSERT INTO torture_lock VALUES (1)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


async def lock_store(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    seconds = rng.uniform(0.5, 6.0)
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(world.store), str(seconds)], stdout=subprocess.PIPE
    )
    world.spawned.add(locker.pid)

    async def release() -> None:
        try:
            await trio.to_thread.run_sync(locker.wait, abandon_on_cancel=True)
        finally:
            locker.kill()
            locker.wait()
            world.spawned.discard(locker.pid)
            if locker.stdout is not None:
                locker.stdout.close()

    nursery.start_soon(release)
    return f"lock the store for {seconds:.1f}s"


async def copy_store(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    """A second daemon on a copy of the store, for a while (it must adopt nothing)."""
    world.copies += 1
    base = world.root / f"copy-{world.copies}"
    base.mkdir(mode=0o700)
    source, target = sqlite3.connect(world.store, timeout=30), sqlite3.connect(base / "e.sqlite3")
    try:
        source.backup(target)
    except sqlite3.Error as exc:
        return f"no copy of the store: {exc}"
    finally:
        source.close()
        target.close()
    log = _log(base / "agentd.log")
    second = subprocess.Popen(
        world.daemon_argv(base / "agentd.sock", base / "e.sqlite3", base / "state"),
        stdout=log, stderr=log,
    )  # fmt: skip
    world.spawned.add(second.pid)
    log.close()
    seconds = rng.uniform(1.0, 3.0)

    async def end() -> None:
        try:
            await trio.sleep(seconds)
        finally:
            second.send_signal(signal.SIGTERM)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(second.wait)
            world.spawned.discard(second.pid)

    nursery.start_soon(end)
    return f"a second daemon on a copy of the store for {seconds:.1f}s"


async def fill_disk(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    if not os.path.ismount(world.state):
        return "no disk of its own to fill"
    seconds = rng.uniform(0.5, 3.0)
    ballast = world.state / "ballast"
    written = await trio.to_thread.run_sync(_fill, ballast)
    start = time.monotonic()
    world.facts.disk_full.append((start, start + seconds))

    async def empty() -> None:
        try:
            await trio.sleep(seconds)
        finally:
            ballast.unlink(missing_ok=True)

    nursery.start_soon(empty)
    return f"fill the state disk ({written >> 20} MiB) for {seconds:.1f}s"


def _fill(path: Path) -> int:
    """Write zeros to ``path`` until the disk is full; how many bytes went in."""
    written = 0
    block = b"\0" * (1 << 20)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return 0
    try:
        while True:
            written += os.write(fd, block)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return written


async def exhaust_fds(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    count = rng.randint(200, 700)
    held = _connect_many(world.socket, count)
    seconds = rng.uniform(0.3, 2.0)

    async def release() -> None:
        try:
            await trio.sleep(seconds)
        finally:
            for conn in held:
                conn.close()

    nursery.start_soon(release)
    return f"{len(held)} idle connections for {seconds:.1f}s"


async def half_frames(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    """Connections that each announce a frame and keep sending all of it but its last byte,
    for a while (the daemon's memory must stay bounded)."""
    held = _connect_many(world.socket, rng.randint(50, 400))
    frames = []
    for _ in held:
        size = rng.choice([5, 100, 4000, 200_000, 1 << 20])
        frames.append(struct.pack(">I", size) + b"x" * (size - 1))
    sent = [0] * len(held)
    seconds = rng.uniform(0.5, 3.0)

    async def push() -> None:
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                for i, (conn, data) in enumerate(zip(held, frames, strict=True)):
                    if sent[i] < len(data):
                        with contextlib.suppress(OSError):
                            sent[i] += conn.send(data[sent[i] : sent[i] + 65536])
                await trio.sleep(0.02)
        finally:
            for conn in held:
                conn.close()

    nursery.start_soon(push)
    return f"{len(held)} half-written frames for {seconds:.1f}s"


async def garbage(world: World, rng: random.Random, nursery: trio.Nursery) -> str:
    held = _connect_many(world.socket, rng.randint(1, 20))
    for conn in held:
        body = os.urandom(rng.randint(0, 300))
        with contextlib.suppress(OSError):
            conn.send(struct.pack(">I", len(body)) + body)
        conn.close()
    return f"{len(held)} garbage frames"


def _log(path: Path) -> BinaryIO:
    return open(path, "ab")  # the caller hands it to a child, then closes it


def _connect_many(path: Path, count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        conn = socket.socket(socket.AF_UNIX)
        conn.setblocking(False)
        try:
            conn.connect(str(path))
        except OSError:
            conn.close()
            break
        held.append(conn)
    return held
