"""The request log (`request_log`, levergate/requestlog/): every finished request's record in a
database you can query (`GET /admin/log`, `levergate log`, `levergate report`).

Off by default for the library and `levergate serve --upstream`; on for the embedded default
(`make run`), so a newcomer sees their requests with nothing configured. Where it lives: the
`stores` connection's PostgreSQL when it has one (replicas share one log), else SQLite under
the cache folder. Records are written in batches by a background job from a bounded queue,
never on the request path: a full queue, a locked or full disk or a database that is down drops
records (counted in `levergate_request_log_dropped_total`), never slows or fails a request.

Bounded on disk by age and size: every `prune_seconds` the records older than `max_age_days`
go, then the oldest until the log is under `max_bytes` (SQLite: the file's pages in use;
PostgreSQL: the table and its indexes). A record is about 0.6 KB with its indexes (SQLite,
measured on the simulator's answers), so the 1 GiB default holds ~1.5 million requests; bodies
add up to twice `bodies.max_bytes` each.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from levergate.config.base import _Strict
from levergate.config.local import cache_home
from levergate.config.stores import ConnectionName

__all__ = ["RequestLogBodiesSettings", "RequestLogSettings", "RequestLogStoreSettings"]

MAX_PATTERNS = 64
MAX_PATTERN_CHARS = 512


class RequestLogStoreSettings(_Strict):
    # `auto`: what the section's `stores` connection offers (postgres, then sqlite), else
    # `sqlite` at `sqlite_path`.
    backend: Literal["auto", "sqlite", "postgres"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    # The SQLite file when no `stores` connection names one (its `sqlite_dir` then holds
    # `requests.sqlite3`).
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "requests.sqlite3"))
    # psycopg conninfo (a secret); normally `stores.<connection>.postgres_dsn`.
    postgres_dsn: SecretStr | None = None
    # A write or a query waiting longer than this on a lock or a dead server fails: the writer
    # keeps its batch (up to the queue's bound) and tries again; a query answers 503.
    timeout_seconds: float = Field(10.0, gt=0, le=600)


class RequestLogBodiesSettings(_Strict):
    """Prompt and answer text, for the aliases, routes or cascades named (what the client asked
    for, or what answered; `*`: all). Off by default: bodies are what users type. Redacted of
    every configured secret and of `redact_patterns`, and capped."""

    # The names whose bodies are logged: an alias, a route or a cascade name; `*` for all.
    models: list[str] = Field(default_factory=list, max_length=1024)
    # Each of the request's JSON and the answer's text is cut to this many bytes.
    max_bytes: int = Field(16 * 1024, ge=256, le=1024 * 1024)
    # Regular expressions replaced by `[redacted]` (emails, account numbers...), after secrets.
    redact_patterns: list[str] = Field(default_factory=list, max_length=MAX_PATTERNS)
    # Bodies waiting to be written, in bytes (the request and the answer as received); past it
    # a record is logged without its body (counted: reason="bodies").
    max_queued_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=4 * 1024**3)
    # Tenants whose text is never kept (bodies, shadow labels' prompts and answers) and never
    # exported (`levergate log export --format openai-finetune`), whatever `models` says.
    private_tenants: list[str] = Field(default_factory=list, max_length=10_000)

    @field_validator("redact_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a redact pattern is longer than {MAX_PATTERN_CHARS} characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redact pattern {pattern!r} does not compile: {exc}") from None
        return patterns


class RequestLogSettings(_Strict):
    """Every finished request's record in SQLite or PostgreSQL, written off the request path
    from a bounded queue, bounded on disk by age and size (levergate/requestlog/). Off by
    default; on for the embedded default (`make run`)."""

    # On: the gateway logs every finished request (`GET /admin/log`, `levergate log`).
    enabled: bool = False
    store: RequestLogStoreSettings = Field(default_factory=RequestLogStoreSettings)
    # Records older than this many days are deleted.
    max_age_days: float = Field(7.0, gt=0, le=3650)
    # The log's size on disk (SQLite: pages in use; PostgreSQL: estimated from the rows): past
    # it the oldest records are deleted. ~0.6 KB a record: 1 GiB holds ~1.5 million.
    max_bytes: int = Field(1024**3, ge=1024 * 1024)
    # How often the age and size bounds are enforced (seconds).
    prune_seconds: float = Field(60.0, gt=0, le=86400)
    # Records waiting to be written; a record finding it full is dropped and counted
    # (reason="queue_full"). About 1.5 KB each in memory: 10,000 is ~15 MB.
    max_queue: int = Field(10_000, ge=10, le=1_000_000)
    # Records per database transaction (a batch is written as soon as this many wait).
    batch_size: int = Field(500, ge=1, le=100_000)
    # The longest a record waits in the queue before its batch is written (seconds).
    flush_seconds: float = Field(1.0, gt=0, le=60)
    # How long the event loop may wait, blocked, for the log's thread's work before it goes on
    # without it (milliseconds; 0: never; unset: 10 with SQLite, 0 with PostgreSQL). SQLite's
    # inserts run on the loop itself; its thread runs the prunes, the labels, the first
    # connection and the writes while another process holds the file locked (the checkpoints,
    # one every 2,000 rows, run in a thread of their own, never waited for); PostgreSQL's
    # thread runs its writes too.
    # Waiting, the loop leaves the thread the GIL each time SQLite hands it back; not waiting,
    # the thread waits for a busy loop to give it up, woken for nothing at each of the loop's
    # system calls, until the loop is idle (in-process, where it never is, the thread's next
    # turn came at the end: SQLite's writes went back to the thread, ~1 context switch a
    # request, 1.18x the CPU of log-off against 1.07x waiting, 2026-12-04). The price is the
    # pause: the loop serves nothing meanwhile (up to this long, on a slow disk), and the
    # requests in flight wait too.
    write_wait_ms: float | None = Field(None, ge=0, le=100)
    # `GET /admin/log`: records per page when `limit` is not given.
    page_size: int = Field(100, ge=1, le=10_000)
    # `GET /admin/log`: the largest `limit` (larger: a 400).
    max_page_size: int = Field(1000, ge=1, le=10_000)
    bodies: RequestLogBodiesSettings = Field(default_factory=RequestLogBodiesSettings)
    # Shadow comparisons (routes', cascades') kept as labels beside their requests
    # (requestlog/labels.py): what `levergate labels export` and `router train --from-log`
    # read. ~0.3 KB a label without texts; past `max_labels` the oldest are deleted (and any
    # older than `max_age_days`).
    shadow_labels: bool = True
    max_labels: int = Field(1_000_000, ge=100, le=100_000_000)
