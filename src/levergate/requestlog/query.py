"""What a reader asks of the request log: filters, a page cursor and a page size, checked and
bounded (a bad value is a `BadRequest` naming it: a 400 over HTTP, exit code 2 in the CLI), and
turned into SQL conditions. Pure: no I/O. `GET /admin/log`, `levergate log`, `levergate report`
and the dashboard all read through `LogFilter` and a store's `page` / `summary` / `series` /
`groups` (requestlog/store.py).

Filters (query parameters, CLI flags): `since`, `until` (epoch seconds, ISO 8601, or a duration
ago such as `15m`, `2h`, `7d`), `tenant`, `key` (key id), `model` (asked for or answered),
`feature`, `workflow` (a workflow id: one `gw.workflow`'s steps), `outcome` (`ok`, `error` for
anything else, or one outcome such as `rate_limited`), `min_latency_ms`, `min_cost_usd`,
`request_id`. Pages go newest first; a cursor
is opaque (the last record's time and sequence number, base64) and a page says `next_cursor`.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from levergate.errors import BadRequest

__all__ = ["Cursor", "LogFilter", "decode_cursor", "encode_cursor", "parse_filter", "parse_time"]

MAX_TEXT = 256
_DURATION = re.compile(r"^(\d{1,9}(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
Cursor = tuple[float, int]  # (ts, seq) of the last record of the page before
MAX_SEQ = 2**63 - 1  # a sequence number is a 64-bit integer in SQLite and PostgreSQL (BIGINT)


@dataclass(frozen=True, slots=True)
class LogFilter:
    since: float | None = None
    until: float | None = None
    tenant: str | None = None
    key: str | None = None
    model: str | None = None
    feature: str | None = None
    workflow: str | None = None
    outcome: str | None = None
    min_latency_ms: float | None = None
    min_cost_usd: float | None = None
    request_id: str | None = None

    def where(self, ph: str) -> tuple[str, list[Any]]:
        """The SQL condition (`ph` is the driver's placeholder) and its values."""
        parts: list[str] = []
        values: list[Any] = []

        def add(sql: str, *given: Any) -> None:
            parts.append(sql.replace("?", ph))
            values.extend(given)

        if self.since is not None:
            add("ts >= ?", self.since)
        if self.until is not None:
            add("ts < ?", self.until)
        exact = (("tenant", self.tenant), ("key_id", self.key), ("feature", self.feature),
                 ("workflow", self.workflow), ("request_id", self.request_id))  # fmt: skip
        for column, value in exact:
            if value is not None:
                add(f"{column} = ?", value)
        if self.model is not None:
            add("(model = ? OR alias = ?)", self.model, self.model)
        if self.outcome == "error":
            add("outcome <> 'ok'")
        elif self.outcome is not None:
            add("outcome = ?", self.outcome)
        if self.min_latency_ms is not None:
            add("total_ms >= ?", self.min_latency_ms)
        if self.min_cost_usd is not None:
            add("cost_usd >= ?", self.min_cost_usd)
        return (" AND ".join(parts) or "1 = 1"), values

    def describe(self) -> dict[str, Any]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


FILTER_PARAMS = frozenset(f.name for f in fields(LogFilter))


def parse_time(text: str, *, param: str, now: float | None = None) -> float:
    """Epoch seconds from epoch seconds, ISO 8601 (UTC unless it says) or a duration ago."""
    text = text.strip()
    if len(text) > 64:
        raise BadRequest(f"'{param}' is too long.", param=param)
    if found := _DURATION.match(text):
        return (time.time() if now is None else now) - float(found[1]) * _UNIT[found[2]]
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise BadRequest(
                f"'{param}' must be epoch seconds, an ISO 8601 time or a duration such as 15m, "
                f"2h or 7d; got {text!r}.", param=param,
            ) from None  # fmt: skip
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value) or not 0 <= value < 1e11:
        raise BadRequest(f"'{param}' is not a time: {text!r}.", param=param)
    return value


def _number(text: str, *, param: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"'{param}' must be a number, got {text[:64]!r}.", param=param) from None
    if not math.isfinite(value) or value < 0:
        raise BadRequest(f"'{param}' must be a finite number >= 0.", param=param)
    return value


def _text(text: str, *, param: str) -> str:
    if not text or len(text) > MAX_TEXT:
        raise BadRequest(f"'{param}' must be 1 to {MAX_TEXT} characters.", param=param)
    if not text.isascii():
        try:  # a command line's bytes that are not UTF-8 arrive as lone surrogates
            text.encode()
        except UnicodeEncodeError:
            raise BadRequest(f"'{param}' is not UTF-8 text.", param=param) from None
    return text


def _text_param(text: str, param: str) -> str:
    return _text(text, param=param)


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "since": lambda v, p: parse_time(v, param=p),
    "until": lambda v, p: parse_time(v, param=p),
    "min_latency_ms": lambda v, p: _number(v, param=p),
    "min_cost_usd": lambda v, p: _number(v, param=p),
}


def parse_filter(params: Mapping[str, str], *, allowed: frozenset[str] = frozenset()) -> LogFilter:
    """A filter from query parameters; any other parameter but `allowed` is a 400."""
    unknown = sorted(set(params) - FILTER_PARAMS - allowed)
    if unknown:
        known = ", ".join(sorted(FILTER_PARAMS | allowed))
        raise BadRequest(f"Unknown parameter {unknown[0]!r}; known: {known}.", param=unknown[0])
    given = {
        name: _PARSERS.get(name, _text_param)(value, name)
        for name, value in params.items()
        if name in FILTER_PARAMS
    }
    found = LogFilter(**given)
    if found.since is not None and found.until is not None and found.since > found.until:
        raise BadRequest("'since' is after 'until'.", param="since")
    return found


def encode_cursor(cursor: Cursor) -> str:
    ts, seq = cursor
    return base64.urlsafe_b64encode(f"{ts!r}:{seq}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> Cursor:
    """The cursor a page gave, or a 400 for anything else."""
    problem = BadRequest("'cursor' is not a cursor this log gave.", param="cursor")
    if len(text) > 128:
        raise problem
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
        ts_text, _, seq_text = raw.partition(":")
        ts, seq = float(ts_text), int(seq_text)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise problem from None
    if not math.isfinite(ts) or not 0 <= seq <= MAX_SEQ:  # beyond: the store's bind fails
        raise problem
    return ts, seq
