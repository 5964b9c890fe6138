"""What every settings module shares: the strict base model and the constants the others name."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SIM_PORT = 8089
WILDCARD = "*"
# Shorter configured values are not treated as secrets by the redactor (levergate/redact.py):
# placeholder keys such as "-", "x" or "none" are not credentials, and replacing them would
# mangle every message that contains the same characters.
SECRET_MIN_CHARS = 8
# The deepest nesting of arrays and objects the gateway parses, wherever JSON enters (request
# bodies, batch lines and uploads, tool-call arguments, upstream answers and events, stored
# records; levergate/core/json_bound.py). A constant, not a setting: it must stay below what
# every serializer on the way out accepts — `orjson.dumps` refuses past 254 levels, and the
# gateway writes back what it read up to a few levels deeper (a batch result line wraps the
# answer in three, a translated tool schema moves one down) — or a body that parsed becomes a
# 500 after the upstream was paid, or crashes the batch runner. Real schemas nest a few dozen
# levels at most (OpenAI's structured outputs allow 10 levels of schema, ~20 of JSON).
MAX_JSON_DEPTH = 128


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
