"""Where JSON text becomes Python values: one nesting bound for every way JSON enters.

JSON enters as request bodies (every protocol), batch lines and uploads, tool-call arguments,
upstream answers and stream events, and the records the stores read back. orjson *parses* up
to 1,024 levels but *writes* at most 254 (`orjson.dumps` raises `JSONEncodeError`, a
TypeError, past that), and the gateway writes back what it read, up to a few levels deeper (a
batch result line, a stored response, a tool schema moved into another protocol's shape). A
body nested 300 deep therefore parsed fine and failed later: a 500 with a traceback after the
upstream was paid, or a batch line that crashed the shared runner on every restart. One bound
at parse time, well under the serializer's, closes all of them: `MAX_JSON_DEPTH` levels
(config/base.py), refused as `TooDeep`, a `JSONDecodeError`, so every caller that already
refuses malformed JSON refuses this too; the edge's 400 names the bound (server/exchange.py).

The check asks the serializer itself: the value, wrapped in `WRITE_DEPTH - limit` lists, is
written by orjson only if it nests at most `limit` deep — so whatever passes can be written
back with that much room to spare, which is the property wanted, checked in C. A small text
first has its brackets counted (depth is at most the number of `[` and `{`), which spares the
wrapping for nearly every request; measured on a 31 KB chat body, the check costs about half
of what parsing it does (counting brackets there cost more than the parse). The wrapping lists
are built once per thread and limit and reused (only their innermost slot changes): building
126 of them on every call was half of a 4 KB body's check.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from levergate.config.base import MAX_JSON_DEPTH

# The deepest nesting `orjson.dumps` writes (255 raises "Recursion limit reached"); pinned by
# tests/unit/core/test_json_bound.py, so an orjson that changes it fails there, not here.
WRITE_DEPTH = 254
# Texts up to this size have their brackets counted before anything else (a few hundred ns).
_COUNT_UP_TO = 4096


class TooDeep(orjson.JSONDecodeError):
    """Valid JSON nested deeper than the gateway's bound (`limit` levels)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"arrays and objects nested deeper than {limit} levels", "", 0)
        self.limit = limit


def parse_json(data: bytes | bytearray | memoryview | str, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """`orjson.loads(data)`, refusing nesting deeper than `limit`: `TooDeep` (a
    `JSONDecodeError`, as malformed JSON is). On the path of every request: kept lean."""
    parsed = orjson.loads(data)
    size = len(data)
    # A text of n bytes nests at most n / 2 levels: most bodies end the check at `size`.
    if (
        size > 2 * limit
        and type(parsed) in _CONTAINERS
        and (size > _COUNT_UP_TO or _brackets(data) > limit)
        and _unwritable(parsed, limit)
    ):
        raise TooDeep(limit)
    return parsed


def too_deep(
    value: Any, *, limit: int, text: bytes | bytearray | memoryview | str | None = None
) -> bool:
    """Whether a parsed JSON value nests arrays and objects deeper than `limit` (its `text`,
    when given, only lets a small one be cleared by counting)."""
    if type(value) not in _CONTAINERS:
        return False
    if text is not None and len(text) <= _COUNT_UP_TO and _brackets(text) <= limit:
        return False
    return _unwritable(value, limit)


_CONTAINERS = frozenset({dict, list})


def _brackets(text: bytes | bytearray | memoryview | str) -> int:
    """The `[` and `{` in `text`: the deepest it can nest."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    raw = text if isinstance(text, bytes) else bytes(text)
    return raw.count(b"[") + raw.count(b"{")


def _unwritable(value: Any, limit: int) -> bool:
    """Whether orjson refuses `value` wrapped in `WRITE_DEPTH - limit` lists."""
    if not 0 < limit < WRITE_DEPTH:
        raise ValueError(f"a JSON depth bound must be between 1 and {WRITE_DEPTH - 1}")
    outer, inner = _wrapping(limit)
    inner[0] = value
    try:
        orjson.dumps(outer)
    except orjson.JSONEncodeError as exc:
        return "Recursion limit" in str(exc)
    finally:
        inner[0] = None  # the wrapping never keeps a parsed value alive
    return False


class _Wrappings(threading.local):
    """Per thread (worker threads parse too), per limit: `WRITE_DEPTH - limit` nested lists,
    the outermost and the innermost, whose one slot holds the value being checked."""

    def __init__(self) -> None:
        self.by_limit: dict[int, tuple[list[Any], list[Any]]] = {}


_WRAPPINGS = _Wrappings()


def _wrapping(limit: int) -> tuple[list[Any], list[Any]]:
    found = _WRAPPINGS.by_limit.get(limit)
    if found is None:
        inner: list[Any] = [None]
        outer = inner
        for _ in range(WRITE_DEPTH - limit - 1):
            outer = [outer]
        found = _WRAPPINGS.by_limit[limit] = (outer, inner)
    return found
