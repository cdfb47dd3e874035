"""The demo's printed timeline and verdict rows, shared by every scene."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TextIO

import attrs
import trio


@attrs.define
class Timeline:
    out: TextIO
    start: float = attrs.field(factory=trio.current_time)
    ended_at: float = 0.0

    def event(self, actor: str, text: str) -> None:
        elapsed = (trio.current_time() - self.start) * 1000
        print(f"  {elapsed:8.3f} ms  {actor:<12} {text}", file=self.out)

    @contextlib.contextmanager
    def logs(self, name: str, level: int = logging.WARNING) -> Iterator[None]:
        """Show the records of logger ``name`` at ``level`` and above as timeline events,
        instead of on stderr, while the block runs."""
        logger = logging.getLogger(name)
        handler = _ToTimeline(self, name, level)
        logger.addHandler(handler)
        propagate, logger.propagate = logger.propagate, False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate


class _ToTimeline(logging.Handler):
    def __init__(self, timeline: Timeline, name: str, level: int) -> None:
        super().__init__(level)
        self.timeline = timeline
        self.actor = name

    def emit(self, record: logging.LogRecord) -> None:
        self.timeline.event(self.actor, record.getMessage())


@attrs.frozen
class Verdict:
    guarantee: str
    passed: bool
    figure: str


def short_site(site: str) -> str:
    """``file.py:12`` from a full ``/path/to/file.py:12``."""
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
