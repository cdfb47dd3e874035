"""The daemon: spawn, reattach or respawn a harness per session, with fencing epochs, a
durable outbox and restart limits; every outcome is reported and every attempt bounded."""

from .._lazy import lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._activity import StallPolicy as StallPolicy
    from ._backoff import Backoff as Backoff
    from ._daemon import Agentd as Agentd
    from ._events import AgentEvent as AgentEvent
    from ._events import EventKind as EventKind
    from ._outcomes import AgentdError as AgentdError
    from ._outcomes import Attached as Attached
    from ._outcomes import Delivered as Delivered
    from ._outcomes import DeliveryFailed as DeliveryFailed
    from ._outcomes import PromptTooLarge as PromptTooLarge
    from ._outcomes import Queued as Queued
    from ._outcomes import SessionFailed as SessionFailed
    from ._outcomes import SessionStatus as SessionStatus
    from ._outcomes import StartFailed as StartFailed
    from ._outcomes import Unconfirmed as Unconfirmed
    from ._state import SessionState as SessionState
    from ._turns import TurnUnknown as TurnUnknown

__all__ = [
    "AgentEvent",
    "Agentd",
    "AgentdError",
    "Attached",
    "Backoff",
    "Delivered",
    "DeliveryFailed",
    "EventKind",
    "PromptTooLarge",
    "Queued",
    "SessionFailed",
    "SessionState",
    "SessionStatus",
    "StallPolicy",
    "StartFailed",
    "TurnUnknown",
    "Unconfirmed",
]

_WHERE = {
    "StallPolicy": "._activity",
    "Backoff": "._backoff",
    "Agentd": "._daemon",
    "AgentEvent": "._events",
    "EventKind": "._events",
    "AgentdError": "._outcomes",
    "Attached": "._outcomes",
    "Delivered": "._outcomes",
    "DeliveryFailed": "._outcomes",
    "PromptTooLarge": "._outcomes",
    "Queued": "._outcomes",
    "SessionFailed": "._outcomes",
    "SessionStatus": "._outcomes",
    "StartFailed": "._outcomes",
    "Unconfirmed": "._outcomes",
    "SessionState": "._state",
    "TurnUnknown": "._turns",
}
"""Where each public name lives: each is imported on first use (``tether._lazy``)."""
_get, __dir__ = lazy(globals(), _WHERE)


def __getattr__(name: str) -> object:
    return _get(name)
