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
from levergate.config.stores import ConnectionName


class BatchStoreSettings(_Strict):
    # `auto`: what the section's `stores` connection offers (postgres, then sqlite), else
    # `sqlite`.
    backend: Literal["auto", "sqlite", "postgres"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "batch.sqlite3"))
    # psycopg conninfo, e.g. "postgresql://postgres@127.0.0.1:5432/levergate" (a secret: it
    # may carry a password). Deprecated: set `stores.<connection>.postgres_dsn` (kept for one
    # release).
    postgres_dsn: SecretStr | None = None
    # A statement waiting longer than this on a lock or a dead server fails (the runner retries).
    timeout_seconds: float = Field(10.0, gt=0)


class TenantQuotasSettings(_Strict):
    """What one tenant may keep in the Batch API's storage (batch/quotas.py), so one tenant
    cannot fill the disk or the job store for the others (one key uploaded 2.16 GB in 20 s;
    3,000 uploads and 3,000 async requests were all accepted). Past a quota the request is
    refused naming it: an upload that does not fit in the bytes left is a 413; a file, batch
    or async request over its count, or a batch or request whose input does not fit, a 429
    `insufficient_quota` (`x-should-retry: false`: room comes back when files are deleted or
    expire and work finishes). Counted from the job store, plus this process's uploads in
    flight (other replicas' uploads in flight at that moment are not seen)."""

    # Bytes kept for the tenant: its files (uploaded and written), the input lines of its
    # open batches (copied into the job store) and the bodies of its pending async requests.
    stored_bytes: int = Field(10 * 1024**3, ge=0)
    files: int = Field(1000, ge=0)  # files listed (uploaded and written)
    queued_batches: int = Field(32, ge=0)  # batches not finished (validating ... finalizing)
    pending_async_requests: int = Field(1000, ge=0)


class BatchSettings(_Strict):
    enabled: bool = False
    dir: str = Field(default_factory=lambda: str(Path(cache_home()) / "batch-files"))
    store: BatchStoreSettings = Field(default_factory=BatchStoreSettings)
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
    # Fairness across tenants (batch/runner.py): free line slots go to the tenant with the
    # fewest lines in flight first (round-robin among equals), and no tenant holds more than
    # this share of `concurrency` at once, so another tenant's line (or async request) finds a
    # slot at once instead of queueing behind a flood: a tenant's 9,000 queued lines delayed
    # another's 1-line batch by ~21 s when lines were claimed oldest batch first. 1.0: no cap.
    # The cap is also a lone tenant's: at `concurrency` 16 against 100 requests/s of ~150 ms
    # answers (benchmarks/batch_throughput.py --quick, one run each on a busy host), 0.75
    # used 73.5% of the provider's limit, 0.9 94.2%, 1.0 88.0% (the runner before: 88.1%).
    max_tenant_share: float = Field(0.9, gt=0, le=1)
    # Interactive traffic first (core/interactive.py): while any client request is in flight
    # on this process, the runner keeps at most this share of `concurrency` lines in flight
    # (at least one), because every line is event-loop work the client requests wait behind
    # (measured in the soak, benchmarks/soak.py: 64 lines in flight kept the loop about a
    # third busy while another tenant's p99 tripled). 1.0: no yielding.
    share_while_interactive: float = Field(0.0625, gt=0, le=1)
    # Job-level steps (validating an input file into lines, writing output files, deferral
    # and async-request steps) run this many at once per process, a tenant's at most half of
    # them, so one tenant's large files never hold another tenant's small batch back.
    job_workers: int = Field(4, ge=1, le=64)
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
    # A job's step (validate, finalize, cancel, deliver) that raises something unexpected, or
    # whose process dies during it, is tried again after `retry_seconds`, this many times in a
    # row at most (counted in the store, so restarts do not reset it); then the job ends
    # `failed` with the reason, and never again takes the runner down (issue 20: one poison
    # batch line crashed the shared runner for every tenant, 9 times in 3.5 minutes).
    max_job_attempts: int = Field(5, ge=1, le=100)
    completion_window_seconds: int = Field(24 * 3600, ge=1)
    # Files (uploaded, and the output and error files batches write) expire this long after
    # they were made, as OpenAI's batch files do after 30 days; an upload may ask for its own
    # `expires_after` (1 hour to 30 days, OpenAI's range). None: files live until deleted.
    file_expiry_seconds: int | None = Field(30 * 24 * 3600, ge=3600)
    # How often expired files and orphaned temporary files are removed (and once at start).
    sweep_seconds: float = Field(60.0, gt=0)
    quotas: TenantQuotasSettings = Field(default_factory=TenantQuotasSettings)
