"""JSON log lines keep a record's own extra fields and drop uvicorn's `color_message` (its message again, with
terminal colour codes)."""

from __future__ import annotations

import json
import logging

from application.logs import JsonLines


def test_a_uvicorn_record_becomes_a_json_line_without_its_color_message() -> None:
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, "Started server process [%d]", (7,), None
    )
    record.color_message = "Started server process [\x1b[36m%d\x1b[0m]"
    record.status = 201

    line = json.loads(JsonLines().format(record))

    assert line["message"] == "Started server process [7]"
    assert line["status"] == 201
    assert "color_message" not in line
