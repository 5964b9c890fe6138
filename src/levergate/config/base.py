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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
