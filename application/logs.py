"""One log format for every process of the service: JSON lines when the output is not a terminal (for log
shippers), a readable line when it is. `log_config(level)` is a `logging.config.dictConfig` dictionary, so
uvicorn's workers (fresh processes) configure themselves the same way; `configure_logging` applies it here.

A record's extra fields (`logger.info(..., extra={"status": 201})`) become keys of its JSON line.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
from datetime import UTC, datetime
from typing import Any

import msgspec

# Attributes every LogRecord has; anything else on a record was passed as `extra`. uvicorn's records also
# carry `color_message` (the message with terminal colour codes), which a JSON line has no use for.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}
_LINE = msgspec.json.Encoder(enc_hook=str)  # what JSON has no type for, as its str()
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """A record as one JSON object: time (UTC, ISO 8601), level, logger, message, extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update((key, value) for key, value in vars(record).items() if key not in _STANDARD)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        try:  # msgspec writes a line several times faster than json.dumps (one per request, the access log)
            return _LINE.encode(line).decode()
        except (TypeError, ValueError):  # a value of no JSON type msgspec knows (a key of such a type)
            return json.dumps(line, default=str, ensure_ascii=False)


def formatter_for_output() -> logging.Formatter:
    """JSON lines unless standard error is a terminal."""
    if sys.stderr.isatty():
        return logging.Formatter(TEXT_FORMAT)
    return JsonLines()


def log_config(level: str = "info") -> dict[str, Any]:
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"service": {"()": "application.logs.formatter_for_output"}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "service", "stream": "ext://sys.stderr"}
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            # uvicorn's loggers carry handlers of their own unless told to use the root's
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},  # ours replaces it
        },
    }


def configure_logging(level: str = "info") -> None:
    logging.config.dictConfig(log_config(level))
