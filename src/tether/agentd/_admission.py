"""``admit``: whether a harness's ``Hello`` is admitted, as a pure decision a test can call.

A hello is admitted only from the harness the daemon started or adopted for the session's
current epoch. A live holder of the current epoch that the daemon lost track of (its record
was overwritten, or a stop did not take) is adopted. Every other hello is refused, naming why;
its sender is made to exit, unless it is the very harness already being stopped.
"""

from __future__ import annotations

import attrs

from ..process import ProcessRef
from ._model import Harness


@attrs.frozen
class Admitted:
    """Attach it."""

    adopt: bool
    """It is the current epoch's holder the daemon lost track of: it becomes the harness."""


@attrs.frozen
class Refused:
    """Tell it ``Superseded``, naming ``reason``."""

    reason: str
    stop: bool
    """Whether to make it exit (``Harnesses.confirm_exit``)."""


def admit(
    epoch: int, current: int | None, peer: ProcessRef, peer_alive: bool, harness: Harness | None
) -> Admitted | Refused:
    """The decision for a hello of ``epoch`` from ``peer`` when the session's current epoch is
    ``current`` and its harness is ``harness``."""
    if current == epoch and (harness is None or not harness.alive) and peer_alive:
        return Admitted(adopt=True)
    being_stopped = harness is not None and harness.ref == peer and harness.retired
    if current != epoch:
        return Refused(f"current epoch is {current}", stop=not being_stopped)
    if harness is None or harness.ref != peer:
        return Refused(f"another harness holds epoch {current}", stop=True)
    if harness.retired:
        return Refused("it is being stopped", stop=False)
    return Admitted(adopt=False)
