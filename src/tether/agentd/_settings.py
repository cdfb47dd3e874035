"""``Settings``: how a daemon runs, validated once, frozen, and shared by every part of it."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from ..wire._control import RETRY_EVERY
from ._activity import StallPolicy
from ._backoff import Backoff

SESSIONS = "sessions"
"""The subdirectory of the state directory that holds one directory per session."""
EVENT_LOG = "agentd.events.jsonl"
"""The event log's name in the state directory (unless ``Agentd.running`` is given one)."""


def session_dir(state_dir: str, name: str) -> str:
    """``<state_dir>/sessions/<name>``: a session's directory. Sessions live one level below
    the store's files and the event log, so no session name can land on one of them (ADR
    0043)."""
    return os.path.join(state_dir, SESSIONS, name)


@attrs.frozen
class Settings:
    """Every knob of ``Agentd`` (see its docstring for what each means)."""

    socket_path: str
    harness_argv: tuple[str, ...]
    heartbeat: float
    miss_limit: int
    restart_limit: tuple[int, float]
    grace: float
    start_timeout: float
    delivery_attempts: int
    state_dir: str
    env: Mapping[str, str]
    reap_orphans: bool
    adopt: bool
    spawn_limit: int
    stall_after: float = 300.0
    on_stall: StallPolicy = StallPolicy.ANNOUNCE
    restart_backoff: Backoff = attrs.field(factory=Backoff)

    def __attrs_post_init__(self) -> None:
        """Refuse settings that make no sense.

        Raises:
            ValueError: naming the first one.
        """
        if not self.harness_argv:
            raise ValueError("harness_argv must name a program")
        if self.heartbeat <= 0 or self.miss_limit < 1 or self.delivery_attempts < 1:
            raise ValueError("heartbeat, miss_limit and delivery_attempts must be positive")
        if self.start_timeout <= 0 or self.grace < 0:
            raise ValueError("start_timeout must be positive and grace not negative")
        if self.spawn_limit < 1:
            raise ValueError("spawn_limit must be at least 1")
        if self.stall_after <= 0:
            raise ValueError("stall_after must be positive")

    @property
    def patience(self) -> float:
        """Seconds without a sign of life that make a harness a suspected phantom."""
        return self.miss_limit * self.heartbeat

    def first_contact(self, *, starting: bool) -> float:
        """Seconds a harness adopted after a restart has to link to this daemon: the start
        timeout if it had not said hello yet (``starting``), else two of its reconnect tries
        (``RETRY_EVERY``) and a heartbeat, or ``patience`` if longer. Patience alone was less
        than one try of a harness backing off while the daemon was down."""
        if starting:
            return max(self.start_timeout, self.patience)
        return max(self.patience, 2 * RETRY_EVERY + self.heartbeat)

    def session_dir(self, name: str) -> str:
        """A session's directory (its harness log, transcript and the state its harness
        keeps): ``session_dir`` of this daemon's state directory."""
        return session_dir(self.state_dir, name)

    @property
    def exit_bound(self) -> float:
        """Seconds a superseded harness has to exit on its own: its documented bound, so the
        daemon never cuts short a clean exit (child agents stopped, calls sealed)."""
        return 2 * self.grace + 1


class SettingsView:
    """Each setting as a read-only attribute of the object that holds them (``Agentd``)."""

    settings: Settings

    @property
    def socket_path(self) -> str:
        return self.settings.socket_path

    @property
    def harness_argv(self) -> tuple[str, ...]:
        return self.settings.harness_argv

    @property
    def heartbeat(self) -> float:
        return self.settings.heartbeat

    @property
    def miss_limit(self) -> int:
        return self.settings.miss_limit

    @property
    def restart_limit(self) -> tuple[int, float]:
        return self.settings.restart_limit

    @property
    def grace(self) -> float:
        return self.settings.grace

    @property
    def start_timeout(self) -> float:
        return self.settings.start_timeout

    @property
    def delivery_attempts(self) -> int:
        return self.settings.delivery_attempts

    @property
    def state_dir(self) -> str:
        return self.settings.state_dir

    @property
    def env(self) -> Mapping[str, str]:
        return self.settings.env

    @property
    def reap_orphans(self) -> bool:
        return self.settings.reap_orphans

    @property
    def adopt(self) -> bool:
        return self.settings.adopt

    @property
    def spawn_limit(self) -> int:
        return self.settings.spawn_limit

    @property
    def stall_after(self) -> float:
        return self.settings.stall_after

    @property
    def on_stall(self) -> StallPolicy:
        return self.settings.on_stall

    @property
    def restart_backoff(self) -> Backoff:
        return self.settings.restart_backoff

    @property
    def patience(self) -> float:
        """Seconds without a sign of life that make a harness a suspected phantom."""
        return self.settings.patience

    @property
    def exit_bound(self) -> float:
        """Seconds a superseded harness has to exit on its own (``2 * grace + 1``)."""
        return self.settings.exit_bound

    def first_contact(self, *, starting: bool) -> float:
        """Seconds a harness adopted after a restart has to link to this daemon."""
        return self.settings.first_contact(starting=starting)

    def session_dir(self, name: str) -> str:
        """A session's directory, ``<state_dir>/sessions/<name>``."""
        return self.settings.session_dir(name)
