"""Finding what breaks prompt caching, by comparing a route's requests with each other.

A provider caches the longest byte-identical prefix. A timestamp, a request id or a user's
name written early in the system prompt makes every request's prefix unique from that point,
so everything after it — often thousands of shared tokens — is paid in full every time. A
regex for dates would find some of these; comparing requests finds all of them, whatever
they look like: two prompts of the same route that differ in a short span and then agree
again for a long stretch have a cache breaker at that span.

`varying_span(a, b)` finds it: the first differing byte `p`, then the nearest point after it
where the two prompts agree again on an `anchor`-byte run, and how long they keep agreeing
from there. A span counts when the agreement after it is at least `min_shared` bytes (worth
caching) and the span itself is short (at most `max_span` bytes: a different prompt is not a
cache breaker). The span is then described by its shape only — `shape()` maps digits to 9
and letters to a, so "2026-12-01T10:32:11" reads "9999-99-99a99:99:99" — never by its text
(prompts carry user data), and `classify()` names the usual suspects.

`tool_order_varies` and `schema_keys_vary` catch the other common breaker: the same tools or
JSON schema serialised in different orders (dicts built from sets, unordered maps in other
languages), which `canonical_tools` can fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

_PATTERNS = (
    ("uuid", re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)),
    ("timestamp", re.compile(
        r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"
    )),
    ("date", re.compile(r"^(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4})$")),
    ("time", re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$")),
    ("hex id", re.compile(r"^[0-9a-f]{12,}$", re.IGNORECASE)),
    ("number", re.compile(r"^-?\d+(\.\d+)?$")),
)  # fmt: skip
_KEPT = frozenset(" -_:./,;+()[]{}\"'#@")  # punctuation that shows a shape, never data


@dataclass(frozen=True, slots=True)
class Span:
    """Where two prompts of one route stop agreeing, and what agreeing again is worth."""

    position: int  # the first differing byte
    length: int  # bytes of the varying span (in the newer prompt)
    shared_after: int  # bytes the prompts agree on right after it (capped at the scan limit)
    shape: str  # the span with digits as 9 and letters as a (no user text)
    kind: str  # "timestamp", "date", "uuid", "hex id", "number", "time" or "varying text"


def _shape_of(ch: str) -> str:
    if ch.isdigit():
        return "9"
    if ch.isalpha():
        return "a"
    return ch if ch in _KEPT else "?"


def shape(text: str, *, limit: int = 48) -> str:
    """Digits as 9, letters (any script) as a, common punctuation kept, anything else ?."""
    return "".join(map(_shape_of, text[:limit])) + ("…" if len(text) > limit else "")


def classify(text: str) -> str:
    token = text.strip().strip("\"'")
    for kind, pattern in _PATTERNS:
        if pattern.match(token):
            return kind
    return "varying text"


def _common_prefix(a: bytes, b: bytes, start_a: int, start_b: int, limit: int) -> int:
    """Bytes a[start_a:] and b[start_b:] agree on, at most `limit` (compared in chunks)."""
    n, step = 0, 256
    while n < limit:
        x = a[start_a + n : start_a + n + step]
        y = b[start_b + n : start_b + n + step]
        if x == y and len(x) == step:
            n += step
            continue
        for i in range(min(len(x), len(y))):
            if x[i] != y[i]:
                return n + i
        return min(n + min(len(x), len(y)), limit)
    return limit


def varying_span(
    a: bytes,
    b: bytes,
    *,
    anchor: int = 32,
    max_span: int = 256,
    min_shared: int = 2048,
    scan: int = 65536,
) -> Span | None:
    """The short span where `b` (newer) departs from `a` before agreeing with it again for at
    least `min_shared` bytes; None when they agree to the end or never agree again soon."""
    a, b = a[:scan], b[:scan]
    p = _common_prefix(a, b, 0, 0, min(len(a), len(b)))
    if p >= min(len(a), len(b)) - anchor:
        return None
    # Step over the span in b, looking for an anchor that a holds shortly after p too.
    for j in range(p, min(len(b) - anchor, p + max_span) + 1, 4):
        i = a.find(b[j : j + anchor], p, p + max_span + anchor)
        if i < 0:
            continue
        shared = _common_prefix(a, b, i, j, scan)
        if shared >= min_shared:
            text = b[p:j].decode("utf-8", "replace")
            return Span(p, j - p, shared, shape(text), classify(text))
    return None


def tool_order_varies(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool:
    """The same tools, in another order."""
    if not a or not b or len(a) != len(b):
        return False
    ka, kb = (
        [orjson.dumps(t, option=orjson.OPT_SORT_KEYS) for t in a],
        [orjson.dumps(t, option=orjson.OPT_SORT_KEYS) for t in b],
    )
    return ka != kb and sorted(ka) == sorted(kb)


def schema_keys_vary(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool:
    """The same tools in the same order whose serialisation still differs: keys reordered."""
    if not a or not b or len(a) != len(b):
        return False
    same = all(
        orjson.dumps(x, option=orjson.OPT_SORT_KEYS) == orjson.dumps(y, option=orjson.OPT_SORT_KEYS)
        for x, y in zip(a, b, strict=True)
    )
    return same and orjson.dumps(a) != orjson.dumps(b)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        if isinstance(tool.get("name"), str):
            return str(tool["name"])
    return ""


def _sorted_keys(value: Any, *, keep_order: bool = False) -> Any:
    """A JSON value with object keys sorted, except under `properties`, whose order is the
    order structured output generates fields in: that one is kept."""
    if isinstance(value, Mapping):
        items = value.items() if keep_order else sorted(value.items())
        return {k: _sorted_keys(v, keep_order=(k == "properties")) for k, v in items}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def canonical_tools(tools: Sequence[Any]) -> list[Any]:
    """Tools ordered by name (stable for equal names), each one's keys sorted: the same set of
    tools and the same schemas, serialised the same way every time."""
    return sorted((_sorted_keys(t) for t in tools), key=_tool_name)
