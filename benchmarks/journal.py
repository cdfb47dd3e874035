"""Durable appends, repair on open, and epoch bumps: tether against the bare calls, in one run.

Run with ``make bench`` (or ``python benchmarks/journal.py``). A VM's disk speeds up and slows
down by a third within seconds, so each round runs tether and the bare loop back to back
(alternating which goes first) and the table gives medians and the range of the rounds'
ratios. Prints one markdown table:

- appends per second of ``Transcript.tool_call`` (encode, append to the plain file, sync by
  the kernel's AIO) against a bare loop of ``os.write`` + ``os.fsync`` of the same bytes in the
  same directory, sequential and from 8 concurrent tasks;
- the time to open (and so scan and validate) a 100,000-entry transcript whose last line is
  torn, and repair it;
- epoch bumps per second of ``SqliteEpochStore.bump`` (WAL, ``synchronous=FULL``,
  ``BEGIN IMMEDIATE``, committed on the trio thread with the WAL synced by the kernel)
  against a bare ``sqlite3`` loop running the same statements on the same settings.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

import trio

from tether import SqliteEpochStore, Transcript, _aio
from tether.journal._entries import ToolCall, encode, new_id, now


async def tether_appends(path: str, count: int) -> float:
    async with await Transcript.open(path) as tr:
        started = time.perf_counter()
        for i in range(count):
            await tr.tool_call("bash", {"cmd": f"echo {i}"})
        return count / (time.perf_counter() - started)


async def tether_concurrent_appends(path: str, count: int, writers: int) -> float:
    async with await Transcript.open(path) as tr:
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for w in range(writers):

                async def write(w: int = w) -> None:
                    for i in range(count // writers):
                        await tr.tool_call("bash", {"cmd": f"echo {w} {i}"})

                nursery.start_soon(write)
        return count / (time.perf_counter() - started)


def bare_appends(path: str, count: int) -> float:
    lines = _lines(count)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        started = time.perf_counter()
        for line in lines:
            os.write(fd, line)
            os.fsync(fd)
        return count / (time.perf_counter() - started)
    finally:
        os.close(fd)


def _lines(count: int) -> list[bytes]:
    return [
        encode(ToolCall(new_id("call"), i + 1, now(), "bash", {"cmd": f"echo {i}"}))
        for i in range(count)
    ]


def _plain(path: str) -> tuple[int, _aio.KernelSync]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    sync = _aio.KernelSync.open(fd)
    assert sync is not None, "no kernel AIO here"
    return fd, sync


def floor_blocking(path: str, count: int) -> float:
    """The floor without trio: ``pwrite`` at the end of the file (growing it), the kernel's
    ``fdatasync``, the thread blocked on the eventfd."""
    lines = _lines(count)
    fd, sync = _plain(path)
    os.set_blocking(sync._eventfd, True)
    offset = 0
    started = time.perf_counter()
    for line in lines:
        os.pwrite(fd, line, offset)
        offset += len(line)
        sync._ring.submit(sync._list)
        os.eventfd_read(sync._eventfd)
        sync._check()
    rate = count / (time.perf_counter() - started)
    os.set_blocking(sync._eventfd, False)
    sync.close()
    os.close(fd)
    return rate


async def floor_trio(path: str, count: int) -> float:
    """The floor under a transcript: the same, awaited in trio (no entries, no index)."""
    lines = _lines(count)
    fd, sync = _plain(path)
    offset = 0
    started = time.perf_counter()
    for line in lines:
        os.pwrite(fd, line, offset)
        offset += len(line)
        await sync.datasync()
    rate = count / (time.perf_counter() - started)
    sync.close()
    os.close(fd)
    return rate


def big_transcript(path: str, count: int) -> None:
    stamp = now()
    with open(path, "wb") as f:
        f.writelines(
            encode(ToolCall(f"call_{i:016x}", i + 1, stamp, "bash", {"cmd": f"echo {i}"}))
            for i in range(count)
        )
        f.write(b'{"type":"tool_call","id":"torn')


async def open_and_repair(path: str) -> float:
    started = time.perf_counter()
    async with await Transcript.open(path) as tr:
        assert tr.repair is not None
        elapsed = time.perf_counter() - started
    return elapsed


async def tether_bumps(path: str, count: int) -> float:
    async with SqliteEpochStore(path) as store:
        await store.bump("warm-up")
        started = time.perf_counter()
        for _ in range(count):
            await store.bump("s1")
        return count / (time.perf_counter() - started)


def bare_bumps(path: str, count: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 30000")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS epochs (session TEXT PRIMARY KEY, epoch INTEGER NOT NULL)"
    )
    statement = (
        "INSERT INTO epochs (session, epoch) VALUES (?, 1)"
        " ON CONFLICT (session) DO UPDATE SET epoch = epoch + 1 RETURNING epoch"
    )
    try:
        started = time.perf_counter()
        for _ in range(count):
            db.execute("BEGIN IMMEDIATE")
            db.execute(statement, ("s1",)).fetchone()
            db.execute("COMMIT")
        return count / (time.perf_counter() - started)
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000, help="appends per round")
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--bumps", type=int, default=1000, help="bumps per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument(
        "--floor", action="store_true", help="also the kernel-sync floor under the transcript"
    )
    args = parser.parse_args(argv)
    ours: dict[str, list[float]] = {"append": [], "append8": [], "repair": [], "bump": []}
    theirs: dict[str, list[float]] = {"append": [], "append8": [], "bump": []}
    floors: dict[str, list[float]] = {"blocking": [], "trio": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as workdir:
        for r in range(args.rounds):
            # Alternate who goes first, so neither always meets the disk warmed by the other.
            first, second = (0, 1) if r % 2 else (1, 0)
            for side in (first, second):
                if side:
                    theirs["append"].append(bare_appends(f"{workdir}/b{r}.jsonl", args.appends))
                    theirs["bump"].append(bare_bumps(f"{workdir}/f{r}.db", args.bumps))
                else:
                    path = f"{workdir}/t{r}.jsonl"
                    ours["append"].append(trio.run(tether_appends, path, args.appends))
                    path = f"{workdir}/e{r}.db"
                    ours["bump"].append(trio.run(tether_bumps, path, args.bumps))
            if args.floor:
                floors["blocking"].append(floor_blocking(f"{workdir}/k{r}", args.appends))
                floors["trio"].append(trio.run(floor_trio, f"{workdir}/m{r}", args.appends))
            theirs["append8"].append(bare_appends(f"{workdir}/g{r}.jsonl", args.appends))
            path = f"{workdir}/c{r}.jsonl"
            ours["append8"].append(trio.run(tether_concurrent_appends, path, args.appends, 8))
        for r in range(3):
            big_transcript(f"{workdir}/big{r}.jsonl", args.entries)
            ours["repair"].append(trio.run(open_and_repair, f"{workdir}/big{r}.jsonl"))
    print(
        f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; {args.rounds} rounds,"
        " each running both sides back to back; medians, and the range of the rounds' ratios\n"
    )
    print("| measure | tether | bare | tether / bare (median) | rounds' range | target |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    rows = (
        ("append", f"`tool_call` appends/s, each durable ({args.appends} a round)", ">= 1.0"),
        ("append8", "`tool_call` appends/s from 8 concurrent tasks (group commit)", "(none)"),
        ("bump", f"epoch bumps/s, WAL + synchronous=FULL ({args.bumps} a round)", ">= 0.8"),
    )
    for key, name, target in rows:
        ratios = sorted(a / b for a, b in zip(ours[key], theirs[key], strict=True))
        tether, bare = statistics.median(ours[key]), statistics.median(theirs[key])
        print(
            f"| {name} | {tether:,.0f} | {bare:,.0f} | {statistics.median(ratios):.2f}"
            f" | {ratios[0]:.2f} to {ratios[-1]:.2f} | {target} |"
        )
    for key, name in (
        ("blocking", "floor: `pwrite` + the kernel's `fdatasync`, a blocked thread, no trio"),
        ("trio", "floor: the same awaited in trio, no transcript"),
    ):
        if floors[key]:
            ratios = sorted(a / b for a, b in zip(floors[key], theirs["append"], strict=True))
            print(
                f"| {name} | {statistics.median(floors[key]):,.0f}"
                f" | {statistics.median(theirs['append']):,.0f}"
                f" | {statistics.median(ratios):.2f} | {ratios[0]:.2f} to {ratios[-1]:.2f} | |"
            )
    print(
        f"| open + repair a {args.entries:,}-entry transcript with a torn tail"
        f" | {min(ours['repair']):.3f} s | n/a | n/a | | < 0.5 s |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
