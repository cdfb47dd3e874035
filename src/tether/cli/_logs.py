"""The daemon's log: a level on every line, ``--log-level``, ``--log-format json`` with each
record's fields, and a ``--log-file`` that SIGHUP (and log rotation) reopens."""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, and every field
    a record was given with ``extra=`` (an agentd event's as ``event_*``)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str = "info", fmt: str = "text", path: str | None = None) -> None:
    """Log at ``level`` in ``fmt`` (``text`` or ``json``) to ``path`` or stderr. A file is a
    ``WatchedFileHandler``: rotation is noticed by itself, and ``reopen`` forces it."""
    handler: logging.Handler
    if path is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        from logging.handlers import WatchedFileHandler  # only a daemon logging to a file

        handler = WatchedFileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise


def reopen() -> None:
    """Close and reopen every log file (SIGHUP: the conventional meaning)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.acquire()
            try:
                handler.close()
                handler.stream = handler._open()
            finally:
                handler.release()
