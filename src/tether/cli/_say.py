"""``say``: the log of ``tether run``, its watcher and its init loop, without ``logging``.

``logging`` (with the ``re`` it imports) would double ``tether run``'s start-up, which is
meant to cost little more than the interpreter's own. Lines look like the logging ones:
``tether run: <message>`` on stderr (warnings and errors by default, everything with ``-v``),
or ``<time> tether.run <message>`` in a ``--log`` file.
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False  # ``typing`` costs start-up time
if TYPE_CHECKING:
    from typing import TextIO

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40


class Say:
    def __init__(self) -> None:
        self.level = WARNING
        self.file: TextIO = sys.stderr
        self.stamped = False

    def to_file(self, path: str) -> None:
        """Everything from INFO up goes to ``path`` (appended), stamped with the time."""
        self.file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self.level = INFO
        self.stamped = True

    def line(self, level: int, message: str) -> None:
        if level < self.level:
            return
        if self.stamped:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
            text = f"{stamp} tether.run {message}\n"
        else:
            text = f"tether run: {message}\n"
        try:
            self.file.write(text)
            self.file.flush()
        except (OSError, ValueError):
            pass  # a closed or full log loses a line, never the run

    def debug(self, message: str) -> None:
        self.line(DEBUG, message)

    def info(self, message: str) -> None:
        self.line(INFO, message)

    def warning(self, message: str) -> None:
        self.line(WARNING, message)

    def error(self, message: str) -> None:
        self.line(ERROR, message)


say = Say()
"""The one log of this process."""
