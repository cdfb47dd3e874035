"""Fencing epochs: a newer epoch provably supersedes an older one, on checks and on writes."""

from ._sqlite import SqliteEpochStore as SqliteEpochStore
from ._store import EpochStore as EpochStore
from ._store import QueuedPrompt as QueuedPrompt
from ._store import SessionRecord as SessionRecord
from ._store import Superseded as Superseded

__all__ = ["EpochStore", "QueuedPrompt", "SessionRecord", "SqliteEpochStore", "Superseded"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
