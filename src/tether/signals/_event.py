"""``SignalEvent``: one received signal and who sent it, read while the sender still exists."""

from __future__ import annotations

import datetime
import logging
import signal

import attrs

logger = logging.getLogger("tether.signals")


@attrs.frozen
class SignalEvent:
    """A signal this process received, with its sender when the platform can tell.

    Two instances of a standard signal sent before one is read are one event: the kernel does
    not queue them.
    """

    signo: int
    """The signal number (compare with ``signal.SIGTERM``...)."""
    sender_pid: int | None
    """The sending process's pid (0: the kernel, e.g. a terminal's ^C); ``None`` if unknown."""
    sender_uid: int | None
    """The sender's real uid; ``None`` if unknown."""
    sender_cmdline: tuple[str, ...] | None
    """The sender's command line, read on receipt (its ``comm`` in brackets if it has none, as
    kernel threads and zombies do); ``None`` if unknown or the sender was already gone."""
    at: datetime.datetime
    """When tether read the signal (UTC)."""

    @property
    def name(self) -> str:
        """``SIGTERM`` rather than 15."""
        try:
            return signal.Signals(self.signo).name
        except ValueError:
            return f"signal {self.signo}"

    def describe(self) -> str:
        """``received SIGTERM from pid=N uid=N cmd=...``, the line tether logs."""
        if self.sender_pid is None:
            return f"received {self.name} from an unknown sender"
        cmd = " ".join(self.sender_cmdline) if self.sender_cmdline is not None else "?"
        return f"received {self.name} from pid={self.sender_pid} uid={self.sender_uid} cmd={cmd}"


def sender_cmdline(pid: int) -> tuple[str, ...] | None:
    """The command line of ``pid`` from ``/proc`` right now; its ``[comm]`` if it has none."""
    if pid == 0:
        return ("[kernel]",)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        if raw:
            return tuple(arg.decode(errors="replace") for arg in raw.rstrip(b"\0").split(b"\0"))
        with open(f"/proc/{pid}/comm", "rb") as f:
            return (f"[{f.read().strip().decode(errors='replace')}]",)
    except OSError:
        return None


def now() -> datetime.datetime:
    """The current wall-clock time in UTC."""
    return datetime.datetime.now(datetime.UTC)
