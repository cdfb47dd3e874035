"""The demo's printed timeline and verdict rows, shared by every scene."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TextIO

import attrs
import trio

from ._hostdelay import Stopwatch


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
    """One guarantee's row: held or not, with the measured figure. ``late``: held, but over its
    time bound by no more than the host's measured CPU wait (it reads LATE, and counts)."""

    guarantee: str
    passed: bool
    figure: str
    late: bool = False

    @classmethod
    def timed(cls, guarantee: str, held: bool, step: Stopwatch, bound: float) -> Verdict:
        """A guarantee with a time bound: ``held`` (what else it needs) and ``step`` within
        ``bound``, or over it by no more than the host's CPU wait during the step (LATE)."""
        figure = f"{step.took:.2f} s (bound {bound:.1f} s)"
        if step.took <= bound:
            return cls(guarantee, held, figure)
        late = step.excuses(bound)
        if late:
            figure += f", the host's CPU wait {step.host_delay:.2f} s"
        return cls(guarantee, held and late, figure, late=held and late)


def short_site(site: str) -> str:
    """``file.py:12`` from a full ``/path/to/file.py:12``."""
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
