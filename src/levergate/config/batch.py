"""The Batch API (`/v1/files`, `/v1/batches`) and its durable runner (levergate/batch/).

Off by default, as the admin API is: on, the gateway keeps uploaded files under `dir` and the
jobs in `store`, and every process runs the runner, which claims lines under a lease. One
machine: SQLite (the default). Several gateway processes sharing the work: PostgreSQL (they
must also share `dir`, where input and output files live). OpenAI's own bounds are the
defaults: 200 MB and 50,000 lines per input file, metadata of 16 pairs (keys 64, values 512
characters), a "24h" completion window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from levergate.config.base import _Strict
from levergate.config.local import cache_home


class BatchStore(_Strict):
    backend: Literal["sqlite", "postgres"] = "sqlite"
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "batch.sqlite3"))
    # psycopg conninfo, e.g. "postgresql://postgres@127.0.0.1:5432/levergate" (a secret: it
    # may carry a password).
    postgres_dsn: SecretStr | None = None
    # A statement waiting longer than this on a lock or a dead server fails (the runner retries).
    timeout_seconds: float = Field(10.0, gt=0)


class Batch(_Strict):
    enabled: bool = False
    dir: str = Field(default_factory=lambda: str(Path(cache_home()) / "batch-files"))
    store: BatchStore = Field(default_factory=BatchStore)
    max_file_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    max_lines: int = Field(50_000, ge=1)
    # One input line (one request body) is parsed whole: bounded like a JSON request body.
    max_line_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_custom_id_chars: int = Field(512, ge=1)
    # Lines in flight per process. The Limits layer paces them under the provider's RPM/TPM
    # at priority `batch` (interactive traffic first), so this only bounds memory and sockets;
    # filling a limit takes rate x answer time lines in flight (Little's law): measured at
    # 100 requests/s and 1 s answers, 16 used 16% of the limit and 128 used 94%
    # (benchmarks/results/batch_throughput-slow-*.md). A line the gateway's own limits shed
    # waits and goes again without spending an attempt (batch/execute.py).
    concurrency: int = Field(128, ge=1, le=4096)
    # A claimed line (or a job being validated or finalized) belongs to its process for this
    # long; the holder renews it every third of it, so it lapses only when the holder is dead.
    # After a crash, lines come back this long after the last renewal.
    lease_seconds: float = Field(30.0, gt=0)
    # How often an idle runner looks for work (a new batch on this process wakes it at once).
    poll_seconds: float = Field(1.0, gt=0)
    # A line whose call fails with a retryable error (429, 503, upstream down or timed out)
    # goes back to the queue after `retry_seconds`, up to this many attempts; then it is an
    # error line. Attempts cut short by a crash count too.
    max_attempts: int = Field(5, ge=1, le=100)
    retry_seconds: float = Field(5.0, ge=0)
    # How long output and error files are kept listed once the batch ends is not bounded here:
    # files live until deleted (OpenAI expires batch files after 30 days).
    completion_window_seconds: int = Field(24 * 3600, ge=1)
