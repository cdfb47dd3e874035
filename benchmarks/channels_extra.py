"""What trio's channels cannot do, against what trio users write instead, in one run.

Run with ``make bench`` (or ``python benchmarks/channels_extra.py [--messages N]``).
``Sender.reserve()`` then ``Permit.send``: the same integers through the same program as
``benchmarks/channels.py``'s throughput table (P producers, one consumer), against trio's
plain ``send`` that a reserve replaces. ``broadcast``: one sender, S subscribers that each
receive every value, against the fan-out trio users build (one unbounded memory channel per
subscriber, each value sent to each).
"""

from __future__ import annotations

import argparse
import gc
import math
import sys

import trio

import tether
from channels import _split, _trio_timed, run_trio

CAPACITIES = (1, 64, 1024)
PRODUCERS = (1, 4)


def run_reserve(capacity: int, producers: int, messages: int) -> float:
    async def main() -> None:
        tx, rx = tether.channel(int, capacity)

        async def produce(sender: tether.Sender[int], items: range) -> None:
            with sender:
                for i in items:
                    permit = await sender.reserve()
                    permit.send(i)

        async with trio.open_nursery() as nursery:
            for items in _split(messages, producers):
                nursery.start_soon(produce, tx.clone(), items)
            tx.close()
            async for _ in rx:
                pass

    return _trio_timed(main)


def run_broadcast(subscribers: int, messages: int) -> float:
    async def main() -> None:
        tx, first = tether.broadcast(int, messages)
        receivers = [first, *(tx.subscribe() for _ in range(subscribers - 1))]

        async def listen(rx: tether.BroadcastReceiver[int]) -> None:
            with rx:
                async for _ in rx:
                    pass

        async with trio.open_nursery() as nursery:
            for rx in receivers:
                nursery.start_soon(listen, rx)
            with tx:
                for i in range(messages):
                    tx.send(i)

    return _trio_timed(main)


def run_fan_out(subscribers: int, messages: int) -> float:
    async def main() -> None:
        pairs = [trio.open_memory_channel[int](math.inf) for _ in range(subscribers)]

        async def listen(rx: trio.MemoryReceiveChannel[int]) -> None:
            async with rx:
                async for _ in rx:
                    pass

        async with trio.open_nursery() as nursery:
            for _, rx in pairs:
                nursery.start_soon(listen, rx)
            for i in range(messages):
                for tx, _ in pairs:
                    tx.send_nowait(i)
            for tx, _ in pairs:
                await tx.aclose()

    return _trio_timed(main)


def best(runner: object, capacity: int, producers: int, messages: int, rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        gc.collect()
        seconds.append(runner(capacity, producers, messages))  # type: ignore[operator]
    return messages / min(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, trio {trio.__version__}\n")
    print(f"`reserve()` + `Permit.send` against trio `send`, messages/s ({args.messages:,},"
          f" best of {args.rounds})\n")  # fmt: skip
    print("| capacity | producers | tether reserve+send | trio send | tether/trio |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for capacity in CAPACITIES:
        for producers in PRODUCERS:
            ours = best(run_reserve, capacity, producers, args.messages, args.rounds)
            theirs = best(run_trio, capacity, producers, args.messages, args.rounds)
            print(f"| {capacity} | {producers} | {ours / 1e3:,.0f}k | {theirs / 1e3:,.0f}k"
                  f" | {ours / theirs:.2f} |", flush=True)  # fmt: skip
    print(f"\n`broadcast` against a fan-out of trio memory channels, values delivered/s"
          f" ({args.messages:,} values to each subscriber, best of {args.rounds})\n")  # fmt: skip
    print("| subscribers | tether broadcast | trio fan-out | tether/trio |")
    print("| ---: | ---: | ---: | ---: |")
    for subscribers in (1, 8):
        count = args.messages * subscribers
        ours = count / min(run_broadcast(subscribers, args.messages) for _ in range(args.rounds))
        theirs = count / min(run_fan_out(subscribers, args.messages) for _ in range(args.rounds))
        print(f"| {subscribers} | {ours / 1e3:,.0f}k | {theirs / 1e3:,.0f}k"
              f" | {ours / theirs:.2f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
