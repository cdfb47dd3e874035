"""What ``ChildGroup.run`` returns, what it raises with ``check=True``, and what a stall says."""

from __future__ import annotations

import enum

import attrs

from ._holders import PipeHolder

DEFAULT_STALL_AFTER = 300.0
"""Seconds without progress that make a stall when nothing better is known: conservative, as
the liveness ledger's default before it has evidence."""


class OnStall(enum.StrEnum):
    """What ``ChildGroup.run`` does once a stall is announced."""

    STOP = "stop"
    """Stop the tool's tree and return (the default)."""
    ANNOUNCE = "announce"
    """Keep waiting (``timeout`` still bounds it)."""


@attrs.frozen
class ToolStall:
    """A tool that has not advanced for ``threshold`` seconds of awake time."""

    tool: str
    """The stalled tool's name."""
    silence: float
    """Seconds it had been silent."""
    threshold: float
    """The silence allowed."""
    waits: tuple[str, ...]
    """Each process of its tree: state, wchan, and the descriptor it reads (``_waits``)."""

    def describe(self) -> str:
        head = (
            f"tool {self.tool} stalled: {self.silence:.1f}s without progress"
            f" (threshold {self.threshold:g}s)"
        )
        return "; ".join([head, *self.waits]) if self.waits else f"{head}; no process left"


@attrs.frozen
class RunResult:
    """How one ``ChildGroup.run`` ended, and what the tool wrote."""

    argv: tuple[str, ...]
    """The program and its arguments, as given."""
    returncode: int | None
    """The exit status (``-signo`` if a signal ended it); ``None`` if it was lost
    (``status_lost``) or even SIGKILL failed."""
    stdout: bytes
    """What it wrote to stdout, up to ``max_output`` (empty without ``capture_output``)."""
    stderr: bytes
    """What it wrote to stderr, up to ``max_output`` (empty without ``capture_output``)."""
    timed_out: bool
    """Its ``timeout`` passed and its tree was stopped."""
    stalled: bool
    """A stall was announced (and, with ``on_stall="stop"``, the tool stopped for it)."""
    holders: tuple[PipeHolder, ...]
    """Processes that kept the output pipes open after the tool exited (each was stopped)."""
    max_silence: float
    """The largest stretch of awake time without progress, in seconds."""
    stall_after: float
    """The stall threshold this run had."""
    timeout: float | None = None
    """The timeout the run had, in seconds (``None``: none)."""
    dropped: int = 0
    """Bytes read past ``max_output`` and not kept (both streams together)."""
    status_lost: bool = False
    """The tool exited but its status could not be had (its keeper was killed and the kernel
    could not tell): not a success."""

    @property
    def failed(self) -> bool:
        """A non-zero exit, a lost status, a timeout or a stall."""
        return self.timed_out or self.stalled or self.returncode != 0

    def reason(self) -> str:
        """Why it failed, in words (``exited 0`` if it did not)."""
        if self.timed_out:
            return f"timed out after {self.timeout:g} s"
        if self.stalled:
            return (
                f"stalled after {self.max_silence:.0f} s without progress"
                f" (threshold {self.stall_after:g} s)"
            )
        if self.status_lost:
            return "its exit status was lost with the group's keeper"
        return f"exited {self.returncode}"


class ToolFailed(Exception):
    """``ChildGroup.run(check=True)``: the tool exited non-zero, timed out or stalled."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(f"{' '.join(result.argv)}: {result.reason()}")
        self.result = result
        """The tool's whole result: code, output and what stopped it."""
