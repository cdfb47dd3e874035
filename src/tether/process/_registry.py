"""The children this process started through any ``ChildGroup``, by pid, until reaped.

The kernel's child table is per process, so this is too: teardown reaps an adopted orphan
itself but leaves a pid listed here to its ``Child``, which records the exit status.
"""

from __future__ import annotations

import weakref
from typing import Protocol


class Reapable(Protocol):
    def poll(self) -> int | None:
        """Reap if exited; the exit status or ``None``."""


SPAWNED: weakref.WeakValueDictionary[int, Reapable] = weakref.WeakValueDictionary()
