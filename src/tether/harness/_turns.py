"""``Turns``: what the engine is doing, seen from the harness without the engine's help.

A turn starts when the engine takes a command off its channel and ends when it comes back to
the channel (``Receiver.observe``). While a turn runs, it advances with every durable transcript
append, every part marked on a stream clock from ``ctx.stream(route)``, and every
``ctx.progress()``; a tool call (``ctx.tool``, ``ctx.run_tool``) advances by its own evidence.
``report`` says it for the daemon's pongs: ``idle``, ``turn`` or ``tool NAME``, how long it has
run, how long it has been silent, and the silence its evidence allows. Every time here is
``time.monotonic`` (awake time), as transcripts, stream clocks and tool runs keep theirs.
"""

from __future__ import annotations

import time
from typing import Any

from ..journal import Transcript
from ..liveness import StreamClock, Thresholds
from ._tools import Tools

IDLE = {"kind": "idle"}


class Turns:
    """The engine's turns, their streams and their progress."""

    def __init__(self, transcript: Transcript, tools: Tools) -> None:
        self.transcript = transcript
        self.tools = tools
        self.in_turn = False
        self.started = self.advanced = time.monotonic()
        self.streams: list[tuple[StreamClock, Thresholds]] = []
        """The current turn's stream clocks, with their route's thresholds."""
        self.finished: list[StreamClock] = []
        """Stream clocks of ended turns, not yet in the ledger."""

    def waiting(self) -> None:
        """The engine came back to its channel: the turn, if one ran, is over."""
        if self.in_turn:
            self.in_turn = False
            self.finished.extend(clock for clock, _ in self.streams)
            self.streams = []

    def took(self, item: object) -> None:
        """The engine took a command: a turn starts."""
        self.in_turn = True
        self.started = self.advanced = time.monotonic()

    def advance(self) -> None:
        """The engine said it made progress (``ctx.progress`` outside a tool)."""
        self.advanced = time.monotonic()

    def add_stream(self, clock: StreamClock, thresholds: Thresholds) -> None:
        self.streams.append((clock, thresholds))

    def report(self) -> dict[str, Any]:
        """The fields of a ``Pong`` that say what the engine is doing now."""
        now = time.monotonic()
        tools = list(self.tools.open.values())
        if tools:
            tool = max(tools, key=lambda open_tool: open_tool.silence())
            limit = tool.stall_after
            return {
                "kind": "tool",
                "name": tool.call.name,
                "age": round(now - tool.activity.started, 3),
                "silence": round(tool.silence(), 3),
                "threshold": limit.seconds if limit is not None else 0.0,
                "source": limit.source if limit is not None else "default",
            }
        if not self.in_turn:
            return IDLE
        last = max(self.advanced, self.transcript.last_append)
        name, threshold, source = "", 0.0, "default"
        for clock, thresholds in self.streams:
            last = max(last, clock.last)
            phase = thresholds.first_token if clock.first is None else thresholds.mid_stream
            name, threshold, source = clock.route, phase.seconds, phase.source
        return {
            "kind": "turn",
            "name": name,
            "age": round(now - self.started, 3),
            "silence": round(max(0.0, now - last), 3),
            "threshold": threshold,
            "source": source,
        }
