"""The demo's printed timeline and verdict rows, shared by every scene."""

from __future__ import annotations

import os
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


@attrs.frozen
class Verdict:
    guarantee: str
    passed: bool
    figure: str


def short_site(site: str) -> str:
    """``file.py:12`` from a full ``/path/to/file.py:12``."""
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
