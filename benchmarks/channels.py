"""Channel throughput and wake-up latency: tether against trio, anyio and asyncio, in one run.

Run with ``make bench`` (or ``python benchmarks/channels.py [--messages N]``). Prints markdown
tables: messages per second for every capacity and producer count, best of 3, with the ratios
tether/trio and tether/asyncio; then the same programs under ``asyncio.run``, tether against
``asyncio.Queue`` and anyio's memory streams; then ``recv_many`` against ``asyncio.Queue``; then
how long a parked receiver takes to wake after the last sender is closed or dropped.

Every implementation moves the same integers through the same shape of program: P producers
share the messages, one consumer receives them one by one. anyio runs on its trio backend, so
it is measured on the same scheduler. asyncio has no rendezvous queue (its ``maxsize=0`` means
unbounded), so capacity 0 has no asyncio figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable

import trio
import trio.testing

import tether

Runner = Callable[[float, int, int], float]
"""(capacity, producers, messages) -> seconds for one complete transfer."""

CAPACITIES: tuple[float, ...] = (0, 1, 64, 1024, math.inf)
PRODUCERS = (1, 4)


def _split(messages: int, producers: int) -> list[range]:
    share = messages // producers
    return [range(i * share, (i + 1) * share) for i in range(producers)]


def _trio_timed(main: Callable[[], Awaitable[None]]) -> float:
    async def timed() -> float:
        start = time.perf_counter()
        await main()
        return time.perf_counter() - start

    return trio.run(timed)


def run_tether(capacity: float, producers: int, messages: int) -> float:
    async def main() -> None:
        tx, rx = tether.channel(int, capacity)

        async def produce(sender: tether.Sender[int], items: range) -> None:
            with sender:
                for i in items:
                    await sender.send(i)

        async with trio.open_nursery() as nursery:
            for items in _split(messages, producers):
                nursery.start_soon(produce, tx.clone(), items)
            tx.close()
            async for _ in rx:
                pass

    return _trio_timed(main)


def run_trio(capacity: float, producers: int, messages: int) -> float:
    async def main() -> None:
        tx, rx = trio.open_memory_channel[int](capacity)

        async def produce(sender: trio.MemorySendChannel[int], items: range) -> None:
            async with sender:
                for i in items:
                    await sender.send(i)

        async with trio.open_nursery() as nursery:
            for items in _split(messages, producers):
                nursery.start_soon(produce, tx.clone(), items)
            await tx.aclose()
            async for _ in rx:
                pass

    return _trio_timed(main)


def _anyio_program(capacity: float, producers: int, messages: int) -> Callable[[], Awaitable[None]]:
    """The transfer on anyio's memory object streams, for either of anyio's backends."""
    import anyio
    from anyio.streams.memory import MemoryObjectSendStream

    async def main() -> None:
        tx, rx = anyio.create_memory_object_stream[int](capacity)

        async def produce(sender: MemoryObjectSendStream[int], items: range) -> None:
            async with sender:
                for i in items:
                    await sender.send(i)

        async with anyio.create_task_group() as group:
            for items in _split(messages, producers):
                group.start_soon(produce, tx.clone(), items)
            await tx.aclose()
            async for _ in rx:
                pass

    return main


def run_anyio(capacity: float, producers: int, messages: int) -> float:
    return _trio_timed(_anyio_program(capacity, producers, messages))


def run_asyncio(capacity: float, producers: int, messages: int) -> float:
    if capacity == 0:
        return math.nan
    done = object()

    async def main() -> float:
        queue: asyncio.Queue[object] = asyncio.Queue(0 if capacity == math.inf else int(capacity))

        async def produce(items: range) -> None:
            for i in items:
                await queue.put(i)
            await queue.put(done)

        start = time.perf_counter()
        tasks = [asyncio.create_task(produce(items)) for items in _split(messages, producers)]
        finished = 0
        while finished < producers:
            if await queue.get() is done:
                finished += 1
        await asyncio.gather(*tasks)
        return time.perf_counter() - start

    return asyncio.run(main())


def run_tether_asyncio(capacity: float, producers: int, messages: int) -> float:
    """The same program as ``run_tether`` under ``asyncio.run``."""

    async def main() -> float:
        tx, rx = tether.channel(int, capacity)

        async def produce(sender: tether.Sender[int], items: range) -> None:
            with sender:
                for i in items:
                    await sender.send(i)

        start = time.perf_counter()
        shares = _split(messages, producers)
        tasks = [asyncio.create_task(produce(tx.clone(), items)) for items in shares]
        tx.close()
        async for _ in rx:
            pass
        await asyncio.gather(*tasks)
        return time.perf_counter() - start

    return asyncio.run(main())


def run_anyio_asyncio(capacity: float, producers: int, messages: int) -> float:
    """anyio's memory object streams under ``asyncio.run`` (anyio's asyncio backend)."""
    main = _anyio_program(capacity, producers, messages)

    async def timed() -> float:
        start = time.perf_counter()
        await main()
        return time.perf_counter() - start

    return asyncio.run(timed())


def run_tether_recv_many(capacity: float, producers: int, messages: int) -> float:
    """Producers ``try_send`` and fall back to ``send`` when full; the consumer ``recv_many``."""
    return _recv_many(capacity, producers, messages, batch_producers=True)


def run_tether_recv_many_send(capacity: float, producers: int, messages: int) -> float:
    """Producers ``await send`` every message (a checkpoint each); the consumer ``recv_many``."""
    return _recv_many(capacity, producers, messages, batch_producers=False)


def _recv_many(capacity: float, producers: int, messages: int, batch_producers: bool) -> float:
    async def main() -> None:
        tx, rx = tether.channel(int, capacity)

        async def produce(sender: tether.Sender[int], items: range) -> None:
            with sender:
                for i in items:
                    if batch_producers:
                        try:
                            sender.try_send(i)
                            continue
                        except trio.WouldBlock:
                            pass
                    await sender.send(i)

        async with trio.open_nursery() as nursery:
            for items in _split(messages, producers):
                nursery.start_soon(produce, tx.clone(), items)
            tx.close()
            try:
                while True:
                    await rx.recv_many(1024)
            except tether.ChannelClosed:
                pass

    return _trio_timed(main)


def best(runner: Runner, capacity: float, producers: int, messages: int, rounds: int) -> float:
    """Messages per second of the best of ``rounds`` runs."""
    seconds = []
    for _ in range(rounds):
        gc.collect()
        seconds.append(runner(capacity, producers, messages))
    fastest = min(seconds)
    return messages / fastest if fastest == fastest else math.nan


def _rate(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value / 1e3:,.0f}k"


def _ratio(a: float, b: float) -> str:
    return "n/a" if math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"


def throughput_table(messages: int, rounds: int) -> list[str]:
    lines = [
        f"Throughput, messages/s ({messages:,} messages, best of {rounds}; k = thousand)",
        "",
        "| capacity | producers | tether | trio | anyio (trio) | asyncio | tether/trio"
        " | tether/asyncio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for capacity in CAPACITIES:
        for producers in PRODUCERS:
            rates = {
                name: best(runner, capacity, producers, messages, rounds)
                for name, runner in (
                    ("tether", run_tether),
                    ("trio", run_trio),
                    ("anyio", run_anyio),
                    ("asyncio", run_asyncio),
                )
            }
            cap = "unbounded" if capacity == math.inf else str(int(capacity))
            lines.append(
                f"| {cap} | {producers} | {_rate(rates['tether'])} | {_rate(rates['trio'])}"
                f" | {_rate(rates['anyio'])} | {_rate(rates['asyncio'])}"
                f" | {_ratio(rates['tether'], rates['trio'])}"
                f" | {_ratio(rates['tether'], rates['asyncio'])} |"
            )
    return lines


def asyncio_table(messages: int, rounds: int) -> list[str]:
    """The throughput program under ``asyncio.run``: tether against ``asyncio.Queue`` (no
    rendezvous: capacity 0 has no figure) and anyio's memory streams (which have one)."""
    lines = [
        "",
        f"Under `asyncio.run`, messages/s ({messages:,} messages, best of {rounds})",
        "",
        "| capacity | producers | tether | asyncio.Queue | anyio (asyncio) | tether/asyncio"
        " | tether/anyio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for capacity in (0, 1, 64, math.inf):
        for producers in PRODUCERS:
            ours = best(run_tether_asyncio, capacity, producers, messages, rounds)
            queue = best(run_asyncio, capacity, producers, messages, rounds)
            anyio_rate = best(run_anyio_asyncio, capacity, producers, messages, rounds)
            cap = "unbounded" if capacity == math.inf else str(int(capacity))
            lines.append(
                f"| {cap} | {producers} | {_rate(ours)} | {_rate(queue)} | {_rate(anyio_rate)}"
                f" | {_ratio(ours, queue)} | {_ratio(ours, anyio_rate)} |"
            )
    return lines


def recv_many_table(messages: int, rounds: int) -> list[str]:
    lines = [
        "",
        "Batching: tether `recv_many(1024)` on capacity 1024 against `asyncio.Queue()` unbounded"
        " (its `put` and `get` never suspend while there is room or items)",
        "",
        "| producers | producer calls | tether recv_many | asyncio unbounded | tether/asyncio |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for producers in PRODUCERS:
        theirs = best(run_asyncio, math.inf, producers, messages, rounds)
        for style, runner in (
            ("`try_send`, `send` when full", run_tether_recv_many),
            ("`await send` each", run_tether_recv_many_send),
        ):
            ours = best(runner, 1024, producers, messages, rounds)
            lines.append(
                f"| {producers} | {style} | {_rate(ours)} | {_rate(theirs)}"
                f" | {_ratio(ours, theirs)} |"
            )
    return lines


def wake_latency(samples: int) -> list[str]:
    """Microseconds from the last sender closed (or dropped) to the parked receiver running."""

    async def tether_close(drop: bool) -> float:
        tx, rx = tether.channel(int)
        woke: list[float] = []

        async def receiver() -> None:
            try:
                await rx.recv()
            except tether.ChannelClosed:
                woke.append(time.perf_counter())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receiver)
            await trio.testing.wait_all_tasks_blocked()
            start = time.perf_counter()
            if drop:
                del tx
            else:
                tx.close()
        return woke[0] - start

    async def trio_close() -> float:
        tx, rx = trio.open_memory_channel[int](0)
        woke: list[float] = []

        async def receiver() -> None:
            try:
                await rx.receive()
            except trio.EndOfChannel:
                woke.append(time.perf_counter())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receiver)
            await trio.testing.wait_all_tasks_blocked()
            start = time.perf_counter()
            tx.close()
        return woke[0] - start

    async def measure() -> dict[str, list[float]]:
        found: dict[str, list[float]] = {"close": [], "drop": [], "trio": []}
        for _ in range(samples):
            found["close"].append(await tether_close(drop=False))
            found["drop"].append(await tether_close(drop=True))
            found["trio"].append(await trio_close())
        return found

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        found = trio.run(measure)

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[int(p) - 1] * 1e6

    trio_median = statistics.median(found["trio"]) * 1e6
    lines = [
        "",
        f"Wake-up after the last sender goes ({samples} samples, µs)",
        "",
        "| path | median | p99 | median / trio close |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, key in (
        ("tether `close()`", "close"),
        ("tether drop (`del`, finalizer via TrioToken)", "drop"),
        ("trio `close()` of the last send channel", "trio"),
    ):
        median = statistics.median(found[key]) * 1e6
        lines.append(
            f"| {label} | {median:.1f} | {q(found[key], 99):.1f} | {median / trio_median:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, trio {trio.__version__}\n")
    for line in throughput_table(args.messages, args.rounds):
        print(line, flush=True)
    for line in asyncio_table(args.messages, args.rounds):
        print(line, flush=True)
    for line in recv_many_table(args.messages, args.rounds):
        print(line, flush=True)
    for line in wake_latency(args.samples):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
