"""Suite-wide guards: no test may leave a process behind."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest


def _descendants() -> list[psutil.Process]:
    return psutil.Process(os.getpid()).children(recursive=True)


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Fail the run if any process started during it outlives it (zombies included)."""
    before = {p.pid for p in _descendants()}
    yield
    started = [p for p in _descendants() if p.pid not in before]
    # Give children that are already exiting a bounded moment to be reaped by their owners.
    _, alive = psutil.wait_procs(started, timeout=5.0)
    described = []
    for p in alive:
        try:
            described.append(f"pid={p.pid} status={p.status()} cmd={p.cmdline()}")
            p.kill()
        except psutil.NoSuchProcess:
            continue
    if described:
        pytest.fail("processes left behind by the suite:\n" + "\n".join(described))
