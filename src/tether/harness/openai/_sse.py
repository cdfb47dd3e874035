"""Server-sent events as the OpenAI streaming API sends them: ``data:`` lines, a blank line
ending each event, ``:`` comments (keep-alives), and ``data: [DONE]`` last."""

from __future__ import annotations

DONE = "[DONE]"
"""The data of the event that ends an OpenAI stream."""


class Events:
    """Feed it lines (without their line ends); it gives back each complete event's data."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> str | None:
        """The data of the event ``line`` completes, if it completes one."""
        if not line:
            if not self._data:
                return None
            data = "\n".join(self._data)
            self._data.clear()
            return data
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        # ``event:``, ``id:``, ``retry:`` and comments carry nothing this client uses.
        return None

    def end(self) -> str | None:
        """The data of an event the stream ended inside (no blank line after it)."""
        return self.line("")
