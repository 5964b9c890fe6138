"""Where `levergate log` and `levergate report` read the request log from: the store itself (the
gateway's configuration names it: `--config`, else the environment and the defaults — on the
embedded default, SQLite under the user's cache folder — or `--db FILE` for a SQLite file), or
a running gateway over `GET /admin/log` (`--url`, with the admin token from `--admin-token` or
`LEVERGATE_ADMIN__TOKEN`). Both answer with the same records (requestlog/row.py's columns)."""

from __future__ import annotations

import argparse
import contextlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from levergate.cli.output import ExitCode
from levergate.config import Settings
from levergate.errors import BadRequest, ConfigError
from levergate.requestlog.extension import store_for
from levergate.requestlog.labels import Labelled
from levergate.requestlog.query import LogFilter, decode_cursor, parse_filter
from levergate.requestlog.store import TABLE, LogStore, LogStoreError, Page, SqliteLog
from levergate.routing.labels import MAX_ROWS

__all__ = [
    "LabelSource", "LogSource", "add_filter_flags", "add_label_source_flags", "add_source_flags",
    "filter_of", "labels_of", "newest", "source_of", "store_of",
]  # fmt: skip

FILTER_FLAGS = ("since", "until", "tenant", "key", "model", "feature", "workflow", "outcome",
                "min_latency_ms", "min_cost_usd", "request_id")  # fmt: skip


class SourceError(Exception):
    """The log could not be read (unreachable gateway, refused token, store down)."""

    def __init__(self, message: str, code: int = ExitCode.UNREACHABLE) -> None:
        super().__init__(message)
        self.code = code


class LogSource(Protocol):
    where: str  # for messages: the file, DSN-less store or URL read

    def page(self, where: LogFilter, *, cursor: str | None, limit: int) -> Page: ...
    def after(self, seq: int, where: LogFilter, *, limit: int) -> list[dict[str, Any]]: ...
    def last_seq(self) -> int: ...
    def summary(self, where: LogFilter) -> dict[str, Any]: ...
    def close(self) -> None: ...


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("where the log is (default: the store the configuration "
                                      "names; the embedded default's SQLite file)")  # fmt: skip
    where = group.add_mutually_exclusive_group()
    where.add_argument("--config", help="the gateway's YAML settings (its request_log.store)")
    where.add_argument("--db", type=Path, help="a request log SQLite file")
    where.add_argument("--url", help="a running gateway's base URL: read GET /admin/log")
    group.add_argument("--admin-token", help="with --url (default: LEVERGATE_ADMIN__TOKEN)")


def add_filter_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("filters")
    group.add_argument("--since", help="epoch seconds, ISO 8601 or a duration ago (15m, 2h, 7d)")
    group.add_argument("--until", help="as --since")
    for name in FILTER_FLAGS[2:]:
        group.add_argument(f"--{name.replace('_', '-')}", dest=name)


def filter_of(args: argparse.Namespace) -> LogFilter:
    given = {name: str(v) for name in FILTER_FLAGS if (v := getattr(args, name, None)) is not None}
    try:
        return parse_filter(given)
    except BadRequest as exc:
        raise ConfigError(f"{exc.message} (--{(exc.param or '').replace('_', '-')})") from None


def source_of(args: argparse.Namespace) -> LogSource:
    if args.url:
        return HttpSource(args.url, _token(args))
    return StoreSource(*store_of(args.config, args.db))


class LabelSource(Protocol):
    """Where the shadow labels are read from: the store, or `GET /admin/labels`."""

    where: str

    def labels(self, which: Labelled, *, limit: int = MAX_ROWS) -> list[dict[str, Any]]: ...
    def label_counts(self, which: Labelled) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


def add_label_source_flags(parser: argparse.ArgumentParser) -> None:
    """`--db` or `--url` (with `--admin-token`), else the store `--config` names, and the time
    window."""
    parser.add_argument("--config", help="the gateway's YAML settings (its request_log.store)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", type=Path, help="a request log SQLite file")
    where.add_argument("--url", help="a running gateway's base URL: read GET /admin/labels")
    parser.add_argument("--admin-token", help="with --url (default: LEVERGATE_ADMIN__TOKEN)")
    parser.add_argument("--since", help="epoch seconds, ISO 8601 or a duration ago (7d)")
    parser.add_argument("--until", help="as --since")


def labels_of(args: argparse.Namespace) -> LabelSource:
    """The labels `args` name: `--url` (a running gateway), else the store (`--config`,
    `--db`)."""
    if getattr(args, "url", None):
        return HttpSource(args.url, _token(args))
    return StoreSource(*store_of(args.config, args.db))


def _token(args: argparse.Namespace) -> str:
    token = getattr(args, "admin_token", None) or _settings(None).admin.token
    if token is None:
        raise ConfigError("--url needs the admin token: --admin-token or LEVERGATE_ADMIN__TOKEN")
    return token if isinstance(token, str) else token.get_secret_value()


def store_of(config: str | None, db: Path | None) -> tuple[LogStore, str]:
    """The log's store itself (`--db FILE`, else the one `--config` names) and where it is."""
    if db is not None:
        if not db.is_file():
            raise ConfigError(f"no request log at {db}")
        _a_log(db)
        return SqliteLog(str(db), timeout_seconds=10.0), str(db)
    settings = _settings(config)
    store = store_for(settings)
    if isinstance(store, SqliteLog) and not Path(store.path).is_file():
        raise ConfigError(f"no request log at {store.path} (is request_log.enabled on?)")
    return store, store.path if isinstance(store, SqliteLog) else "PostgreSQL"


def newest(source: LogSource, where: LogFilter, *, page: int,
           most: int | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
    """The records `where` selects, newest first, read `page` at a time by the log's cursor (a
    gateway's pages may hold fewer), `most` of them at most (None: all)."""
    cursor, left = None, most
    while left is None or left > 0:
        found = source.page(where, cursor=cursor, limit=page if left is None else min(page, left))
        yield from found.records
        if left is not None:
            left -= len(found.records)
        if found.next_cursor is None:
            return
        cursor = found.next_cursor


def _a_log(db: Path) -> None:
    """Refuse a file that is not a request log before opening it as the log's store, which
    makes the log's tables in the file it opens (another program's database, named by mistake,
    was changed so)."""
    try:
        with contextlib.closing(
            sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        ) as conn:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                 (TABLE,)).fetchone()  # fmt: skip
    except sqlite3.Error as exc:
        raise ConfigError(f"{db} is not a request log: {exc}") from None
    if found is None:
        raise ConfigError(f"{db} is not a request log (it has no {TABLE} table)")


def _settings(path: str | None) -> Settings:
    return Settings.load(path) if path else Settings.load()


class StoreSource:
    def __init__(self, store: LogStore, where: str) -> None:
        self._store = store
        self.where = where

    def _call(self, work: Any) -> Any:
        try:
            return work(self._store)
        except LogStoreError as exc:
            raise SourceError(str(exc)) from None

    def page(self, where: LogFilter, *, cursor: str | None, limit: int) -> Page:
        try:
            at = decode_cursor(cursor) if cursor else None
        except BadRequest as exc:  # exit 2, as the gateway's 400 for it is (HttpSource)
            raise ConfigError(f"{exc.message} (--cursor)") from None
        return self._call(lambda s: s.page(where, cursor=at, limit=limit))  # type: ignore[no-any-return]

    def after(self, seq: int, where: LogFilter, *, limit: int) -> list[dict[str, Any]]:
        return self._call(lambda s: s.after(seq, where, limit=limit))  # type: ignore[no-any-return]

    def last_seq(self) -> int:
        return int(self._call(lambda s: s.last_seq()))

    def summary(self, where: LogFilter) -> dict[str, Any]:
        return self._call(lambda s: s.summary(where))  # type: ignore[no-any-return]

    def labels(self, which: Labelled, *, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
        """The shadow labels `which` wants, oldest first, at most `limit`."""
        return self._call(lambda s: s.labels(which, limit=limit))  # type: ignore[no-any-return]

    def label_counts(self, which: Labelled) -> list[dict[str, Any]]:
        """The shadow labels counted per route or cascade and day (`levergate analyze`)."""
        return self._call(lambda s: s.label_counts(which))  # type: ignore[no-any-return]

    def close(self) -> None:
        self._store.close()


class HttpSource:
    """`GET /admin/log` of a running gateway."""

    def __init__(self, url: str, token: str) -> None:
        base = url.rstrip("/").removesuffix("/v1")
        self.where = base
        self._http = httpx.Client(base_url=base, timeout=30.0,
                                  headers={"authorization": f"Bearer {token}"})  # fmt: skip
        self._most: int | None = None  # the gateway's largest page, once a 400 named it

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise SourceError(f"{self.where} could not be reached: {exc}") from None
        if answer.status_code != 200:
            try:
                message = answer.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = answer.text[:200]
            code = ExitCode.USAGE if answer.status_code in (400, 401, 404) else ExitCode.FAILED
            raise SourceError(f"{self.where}{path}: {answer.status_code} {message}", code)
        found: dict[str, Any] = answer.json()
        return found

    def _paged(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        """A page of `path`, its `limit` lowered to the gateway's `max_page_size` when that is
        smaller (its 400 names it): export, report and tail ask for 1,000 a page, and a
        gateway allowing fewer refused every one of them."""
        if self._most is not None:
            params = {**params, "limit": min(params["limit"], self._most)}
        try:
            return self._get(path, params)
        except SourceError as exc:
            most = re.search(r"'limit' must be an integer from 1 to (\d+)", str(exc))
            if most is None or int(most.group(1)) >= params["limit"]:
                raise
            self._most = int(most.group(1))
        return self._get(path, {**params, "limit": self._most})

    def page(self, where: LogFilter, *, cursor: str | None, limit: int) -> Page:
        params: dict[str, Any] = {**where.describe(), "limit": limit}
        if cursor:
            params["cursor"] = cursor
        found = self._paged("/admin/log", params)
        return Page(found["data"], found.get("next_cursor"))

    def after(self, seq: int, where: LogFilter, *, limit: int) -> list[dict[str, Any]]:
        newer: list[dict[str, Any]] = []
        for record in newest(self, where, page=1000):
            if record["seq"] <= seq or len(newer) >= limit:
                break
            newer.append(record)
        return sorted(newer, key=lambda r: int(r["seq"]))

    def last_seq(self) -> int:
        records = self.page(LogFilter(), cursor=None, limit=1).records
        return int(records[0]["seq"]) if records else 0

    def summary(self, where: LogFilter) -> dict[str, Any]:
        return self._get("/admin/log/summary", where.describe())

    def gauge(self, name: str, label: str) -> dict[str, float]:
        """`name`'s values by `label` from the gateway's `/metrics` ({} when it cannot be read:
        the metrics token differs, or metrics are off)."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            answer = self._http.get("/metrics")
        except httpx.HTTPError:
            return {}
        if answer.status_code != 200:
            return {}
        return {s.labels.get(label, ""): s.value
                for family in text_string_to_metric_families(answer.text)
                for s in family.samples if s.name == name}  # fmt: skip

    def labels(self, which: Labelled, *, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
        """`GET /admin/labels`, page by page (`LABEL_PAGE` each), at most `limit` rows."""
        params = {**_label_params(which), "limit": min(LABEL_PAGE, limit)}
        found: list[dict[str, Any]] = []
        while len(found) < limit:
            page = self._paged("/admin/labels", params)  # a gateway's max_page_size may be less
            found.extend(page["data"][: limit - len(found)])
            if not page.get("next_cursor"):
                break
            params["cursor"] = page["next_cursor"]
        return found

    def label_counts(self, which: Labelled) -> list[dict[str, Any]]:
        found = self._get("/admin/labels/counts", _label_params(which))
        rows: list[dict[str, Any]] = found["data"]
        return rows

    def close(self) -> None:
        self._http.close()


LABEL_PAGE = 1000  # rows per GET /admin/labels (the default request_log.max_page_size)


def _label_params(which: Labelled) -> dict[str, Any]:
    params: dict[str, Any] = {"uncompared": "true" if which.uncompared else "false"}
    for name in ("name", "since", "until"):
        if (value := getattr(which, name)) is not None:
            params[name] = repr(value) if isinstance(value, float) else value
    if which.layers is not None:
        params["layer"] = ",".join(which.layers)
    return params
