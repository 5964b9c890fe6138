"""A small JSON file the gateway loads and watches (a router file, the semantic cache's
thresholds): read within a size bound, every way it can fail a `ConfigError` naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from levergate.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def read_json_file(
    path: Path, *, what: str, max_bytes: int, kind: str | None = None, missing_ok: bool = False
) -> Any:
    """The JSON value in `path`, or None when it does not exist and `missing_ok`. The errors
    name `what` ("router file") and the path: larger than `max_bytes`, unreadable, and not
    UTF-8 or not JSON ("is not UTF-8", or with a `kind`: "is not a levergate router (not
    UTF-8)")."""

    def unlike(why: str) -> str:
        return f"{what} {path} is not {kind} ({why})" if kind else f"{what} {path} is {why}"

    try:
        if path.stat().st_size > max_bytes:
            raise ConfigError(f"{what} {path} is larger than {max_bytes} bytes")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        if missing_ok and isinstance(exc, FileNotFoundError):
            return None
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(unlike("not UTF-8")) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(unlike("not JSON")) from None


def validated(model: type[M], data: Any, *, what: str, path: Path) -> M:
    """`data` as `model`; its first validation error, with where it is, as a `ConfigError`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{what} {path} is malformed at {where}: {first['msg']}") from None
