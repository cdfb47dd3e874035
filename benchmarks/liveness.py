"""The hot path of stream liveness: ``StreamClock.mark`` and ``verdict`` against a bare
``time.monotonic()`` call, in one run.

Run with ``make bench`` (or ``python benchmarks/liveness.py``). Each figure is the best of 5
runs of 200,000 calls; the target for ``mark`` and ``verdict`` is under 2 µs each.
"""

from __future__ import annotations

import time
import timeit

from tether.liveness import StreamClock, Threshold, Thresholds, verdict

CALLS = 200_000
REPEAT = 5


def per_call(statement: object) -> float:
    """Best nanoseconds per call of a zero-argument callable."""
    timer = timeit.Timer(statement)  # type: ignore[arg-type]
    return min(timer.repeat(REPEAT, CALLS)) / CALLS * 1e9


def main() -> None:
    stream = StreamClock("route")
    stream.mark("text")
    thresholds = Thresholds("route", Threshold(300, "default"), Threshold(30, "quantile"))
    bare = per_call(time.monotonic)
    rows = [
        ("StreamClock.mark('text')", per_call(lambda: stream.mark("text"))),
        ("StreamClock.mark('reasoning')", per_call(lambda: stream.mark("reasoning"))),
        ("verdict(clock, thresholds), alive", per_call(lambda: verdict(stream, thresholds))),
    ]
    stale = StreamClock("route")
    stale.mark("text")
    stale.last -= 60  # silent for a minute: every verdict builds a Stale
    rows.append(("verdict(clock, thresholds), stale", per_call(lambda: verdict(stale, thresholds))))
    print(f"liveness hot path, best of {REPEAT} x {CALLS} calls\n")
    print("| call | ns per call | time.monotonic() | ratio | under 2 µs |")
    print("| --- | --- | --- | --- | --- |")
    for name, ns in rows:
        under = "yes" if ns < 2000 else "NO"
        print(f"| {name} | {ns:.0f} | {bare:.0f} | {ns / bare:.2f}x | {under} |")


if __name__ == "__main__":
    main()
