"""Fencing epochs: a newer epoch provably supersedes an older one, on checks and on writes.

``EtcdEpochStore`` is imported on first use only: it needs the ``tether[etcd]`` extra (httpx),
which the rest of tether never imports.
"""

from typing import TYPE_CHECKING, Any

from .._util import reexport
from ._sqlite import SqliteEpochStore as SqliteEpochStore
from ._store import EpochStore as EpochStore
from ._store import HostIdInUse as HostIdInUse
from ._store import LeasedEpochStore as LeasedEpochStore
from ._store import OwnedElsewhere as OwnedElsewhere
from ._store import QueuedPrompt as QueuedPrompt
from ._store import SessionRecord as SessionRecord
from ._store import StoreInUse as StoreInUse
from ._store import StoreUnavailable as StoreUnavailable
from ._store import Superseded as Superseded

__all__ = [
    "EpochStore",
    "EtcdEpochStore",
    "HostIdInUse",
    "LeasedEpochStore",
    "OwnedElsewhere",
    "QueuedPrompt",
    "SessionRecord",
    "SqliteEpochStore",
    "StoreInUse",
    "StoreUnavailable",
    "Superseded",
]

if TYPE_CHECKING:
    from ._etcd import EtcdEpochStore as EtcdEpochStore

reexport(globals())


def __getattr__(name: str) -> Any:
    if name == "EtcdEpochStore":
        from ._etcd import EtcdEpochStore

        EtcdEpochStore.__module__ = __name__
        return EtcdEpochStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
