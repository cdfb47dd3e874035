"""``WATCHDOG``: the one thread that ticks every detector watching a run, so watching a short
trio run costs a set insertion, not a thread start."""

from __future__ import annotations

import os
import signal
import threading
from typing import Protocol

LINGER = 2.0
"""Seconds the thread stays up with nothing to watch, for the next run of a test suite."""


class Ticked(Protocol):
    @property
    def step(self) -> float: ...

    def tick(self) -> None: ...


class Watchdog:
    """Ticks each added detector every ``step`` seconds (the smallest of theirs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: set[Ticked] = set()
        self._thread: threading.Thread | None = None
        self.ident: int | None = None
        """The thread's ident, while it runs (analyses skip it)."""

    def add(self, detector: Ticked) -> None:
        with self._lock:
            self._active.add(detector)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tether deadlock detector", daemon=True
                )
                self._thread.start()

    def discard(self, detector: Ticked) -> None:
        with self._lock:
            self._active.discard(detector)

    def _run(self) -> None:
        # Signals belong to the main thread (tether.signals reads them from a signalfd there).
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        self.ident = threading.get_ident()
        idle = 0.0
        pause = threading.Event()
        while True:
            with self._lock:
                active = list(self._active)
                step = min((d.step for d in active), default=0.25)
                if not active and idle >= LINGER:
                    self._thread = self.ident = None
                    return
            idle = 0.0 if active else idle + step
            pause.wait(step)
            for detector in active:
                try:
                    detector.tick()
                except Exception:  # noqa: BLE001 - one detector's fault must not stop the rest
                    self.discard(detector)

    def _forked(self) -> None:
        """In a forked child: the thread did not come along, and its lock may be held."""
        self._lock = threading.Lock()
        self._active = set()
        self._thread = self.ident = None


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG._forked)
