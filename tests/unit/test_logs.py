"""Log records as JSON lines: the message and the record's structured fields as JSON fields, a
traceback as `exception`, and the redacting filter applied to the fields too."""

from __future__ import annotations

import logging
import sys

import orjson

from levergate.logs import JsonFormatter
from levergate.redact import RedactingFilter, Redactor

SECRET = "sk-configured-secret-0123"  # noqa: S105 - a test value


def record(msg: str, *args: object, fields: dict[str, object] | None = None) -> logging.LogRecord:
    made = logging.LogRecord("levergate.access", logging.INFO, __file__, 1, msg, args, None)
    if fields is not None:
        made.fields = fields
    return made


def test_a_record_is_one_json_object_with_its_fields() -> None:
    line = JsonFormatter().format(
        record("%s answered %d", "gw", 200, fields={"status": 200, "path": "/v1/models"})
    )
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["message"] == "gw answered 200"
    assert (entry["level"], entry["logger"]) == ("info", "levergate.access")
    assert (entry["status"], entry["path"]) == (200, "/v1/models")
    assert entry["time"].endswith("Z")


def test_fields_cannot_replace_the_records_own_keys() -> None:
    entry = orjson.loads(JsonFormatter().format(record("real", fields={"message": "forged"})))
    assert entry["message"] == "real"


def test_the_filter_redacts_the_fields_before_the_formatter_sees_them() -> None:
    redactor = Redactor([SECRET])
    scrub = RedactingFilter()
    scrub.add(redactor)
    made = record("GET %s", f"/healthz?key={SECRET}", fields={"path": f"/healthz?key={SECRET}\n"})
    assert scrub.filter(made)
    line = JsonFormatter().format(made)
    assert SECRET not in line
    entry = orjson.loads(line)
    assert entry["path"] == "/healthz?key=[redacted]\\n"  # and the line break escaped
    assert entry["message"] == "GET /healthz?key=[redacted]"


def test_a_traceback_is_one_field() -> None:
    try:
        int("boom")
    except ValueError:
        made = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = orjson.loads(JsonFormatter().format(made))
    assert "ValueError: invalid literal for int()" in entry["exception"]
