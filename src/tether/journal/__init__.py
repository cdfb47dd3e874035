"""Transcripts: write-ahead tool calls, sealed results, repair of torn and corrupt tails."""

from ._disk import JournalError as JournalError
from ._disk import Repair as Repair
from ._disk import scan as scan
from ._entries import Entry as Entry
from ._entries import Event as Event
from ._entries import Message as Message
from ._entries import ToolCall as ToolCall
from ._entries import ToolResult as ToolResult
from ._transcript import Transcript as Transcript

__all__ = [
    "Entry",
    "Event",
    "JournalError",
    "Message",
    "Repair",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "scan",
]

for _name in __all__:
    if _name != "Entry":  # a type alias
        globals()[_name].__module__ = __name__
del _name
