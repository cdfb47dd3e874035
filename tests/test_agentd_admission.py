"""``admit``: the decision on a harness's hello, called alone (no daemon, no socket)."""

from __future__ import annotations

import os

import pytest
import trio

from tether.agentd._admission import Admitted, Refused, admit
from tether.agentd._model import Harness
from tether.process import ProcessRef

ME = ProcessRef.of(os.getpid())
OTHER = ProcessRef(ME.pid + 1, ME.create_time + 1)


def harness(ref: ProcessRef, *, exited: bool = False, retiring: bool = False) -> Harness:
    found = Harness(ref, 7, None, since=0.0)
    if exited:
        found.exit(0)
    if retiring:
        found.retiring = trio.Event()
    return found


@pytest.mark.parametrize(
    ("epoch", "current", "alive", "session_harness", "decision"),
    [
        (7, 7, True, harness(ME), Admitted(adopt=False)),
        (7, 7, True, None, Admitted(adopt=True)),  # the current holder we lost track of
        (7, 7, True, harness(OTHER, exited=True), Admitted(adopt=True)),
        (7, 7, False, None, Refused("another harness holds epoch 7", stop=True)),
        (6, 7, True, harness(ME), Refused("current epoch is 7", stop=True)),
        (6, 7, True, harness(ME, retiring=True), Refused("current epoch is 7", stop=False)),
        (7, 7, True, harness(OTHER), Refused("another harness holds epoch 7", stop=True)),
        (7, 7, True, harness(ME, retiring=True), Refused("it is being stopped", stop=False)),
        (1, None, True, None, Refused("current epoch is None", stop=True)),
    ],
)
def test_admit_decides_from_the_facts_alone(
    epoch: int,
    current: int | None,
    alive: bool,
    session_harness: Harness | None,
    decision: Admitted | Refused,
) -> None:
    assert admit(epoch, current, ME, alive, session_harness) == decision
