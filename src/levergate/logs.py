"""How a levergate process writes its log: one stderr handler, each record as a text line or as
one JSON object per line (`log_format`), every record redacted first (levergate/redact.py).

Only the command line calls `configure` (`levergate serve`): a library user's process keeps its
own logging. The JSON form is for log shippers: `time` (UTC, ISO 8601, milliseconds), `level`,
`logger`, `message`, the structured fields a record carries (`extra={"fields": {...}}`: the
access log's method, path, status, duration...) and `exception` with its traceback. The
redacting filter runs before the formatter and scrubs the fields too, so a secret reaches
neither form.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from levergate.config import Settings
from levergate.redact import Redactor
from levergate.redact import install as install_redaction

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ACCESS_LOGGER = "levergate.access"  # server/access_log.py
CLI_LOGGER = "levergate.cli"  # the commands' own lines (cli/serve.py: serving on ...)
# The attribute of a record whose mapping the JSON form writes as fields of its own.
FIELDS = "fields"


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON; structured fields beside the message."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        millis = int((record.created - seconds) * 1000)
        entry: dict[str, Any] = {
            "time": f"{stamp}.{millis:03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            entry.update((k, v) for k, v in fields.items() if k not in entry)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return orjson.dumps(entry, default=str).decode()


def configure(settings: Settings) -> Redactor:
    """Send every record to stderr in `settings.log_format`, at `settings.log_level`, redacted
    of every secret the settings hold. Returns the redactor, which the caller keeps alive for as
    long as it logs (the filter holds it weakly)."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    # On the handler as well as on levergate's loggers: other libraries' records (asyncio,
    # uvicorn, httpx) may carry an upstream's text too; logs also lose the query strings of
    # configured URLs (a webhook's `?token=`, which httpx logs with every request it makes).
    redactor = Redactor.for_logs(settings)
    install_redaction(redactor, handler=handler)
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler], force=True)
    # The start-up line is printed whatever the level in text mode; so it is in JSON mode.
    logging.getLogger(CLI_LOGGER).setLevel(logging.INFO)
    if settings.server.access_log:
        # Asked for by name: written whatever `log_level` says of the other records.
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)
    return redactor
