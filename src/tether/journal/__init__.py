"""Transcripts: write-ahead tool calls, sealed results, repair of torn and corrupt tails."""

from .._util import reexport
from ._disk import JournalError as JournalError
from ._disk import Repair as Repair
from ._entries import MAX_DEPTH as MAX_DEPTH
from ._entries import Entry as Entry
from ._entries import Event as Event
from ._entries import Message as Message
from ._entries import ToolCall as ToolCall
from ._entries import ToolResult as ToolResult
from ._scan import Damage as Damage
from ._scan import Scan as Scan
from ._scan import scan as scan
from ._transcript import Transcript as Transcript

__all__ = [
    "MAX_DEPTH",
    "Damage",
    "Entry",
    "Event",
    "JournalError",
    "Message",
    "Repair",
    "Scan",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "scan",
]

reexport(globals())
