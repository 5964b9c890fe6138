"""The values the Batch API stores and shows: files, jobs (batches) and their lines.

A `Job` is what a batch is between requests: its status, timestamps and the facts the wire
object (`Job.wire`) is built from. Its `kind` is "batch" here; the same record serves later job
kinds (an async single request is a job of one line, a deferral a job with a provider's batch
id in `extra`). Lines are stored one row each (`LineRow`): the request, the lease, the result.

Status machine (OpenAI's names; `end` is where `finalizing` or `cancelling` leads):

    validating ──> in_progress ──> finalizing ──> completed
        │              │   └──(expires_at passed)──> finalizing(end=expired) ──> expired
        └──> failed    └──(cancel)──> cancelling ──> cancelled
    validating ──(cancel)──> cancelling ──> cancelled
    any of validating, in_progress, finalizing ──(a step failed `max_job_attempts` times)──> failed

A job's step (validate, finalize, cancel, a later kind's step) that raises something
unexpected, or whose process dies during it, is tried again; `attempts` counts the tries in a
row, in the store, so a restart does not reset it, and the runner ends the job `failed` (or
`cancelled`, when it was being cancelled) with the reason once they run out (batch/runner.py).
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from levergate.core.json_bound import parse_json

Status = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
TERMINAL: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})
# SQL for "not terminal" (`status NOT IN ...`): a job still open, holding its input.
OPEN_NOT = "(" + ", ".join(f"'{status}'" for status in sorted(TERMINAL)) + ")"
# Where each status may go next; anything else is a bug (or a racing replica) and is refused.
NEXT: dict[str, frozenset[str]] = {
    "validating": frozenset({"in_progress", "failed", "cancelling"}),
    "in_progress": frozenset({"finalizing", "cancelling", "failed"}),
    "finalizing": frozenset({"completed", "expired", "failed"}),
    "cancelling": frozenset({"cancelled"}),
}
ENDPOINTS: dict[str, Literal["chat", "completion", "embedding"]] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
}
PURPOSES = frozenset({"batch"})


class TransitionError(Exception):
    """A status change the machine does not allow."""


ASYNC_PREFIX = "areq_"  # an async request's job id (batch/async_requests.py)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def can_move(status: str, to: str) -> bool:
    return to in NEXT.get(status, frozenset())


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    tenant: str
    filename: str
    purpose: str  # "batch" (uploaded), "batch_output" (written by the runner)
    bytes: int
    created_at: int
    lines: int = 0
    expires_at: int | None = None  # Unix seconds; swept after (batch/quotas.py)

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }


# Job fields kept in columns of their own, not inside its stored `data`.
INDEXED = ("id", "tenant", "status", "kind", "created_at", "expires_at", "attempts", "holds")


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant: str
    status: str
    endpoint: str
    input_file_id: str
    created_at: int
    expires_at: int
    completion_window: str = "24h"
    kind: str = "batch"
    metadata: dict[str, str] | None = None
    key_id: str | None = None  # the gateway key that made it (auth on): its rights apply
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, finalizing_at, ...
    end: str | None = None  # the status `finalizing` / `cancelling` leads to
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # for later job kinds
    # Times in a row a runner took this job up without finishing its step (a column: `lease`
    # counts it, a clean `release` clears it); not part of `data`.
    attempts: int = 0
    # What it holds in the job store while open (a batch's input file, an async request's
    # body): counted against its tenant's `batch.quotas.stored_bytes`.
    holds: int = 0

    def moved(self, to: str, *, now: float, **changes: Any) -> Job:
        """This job in status `to`, stamped `<to>_at`; TransitionError if the machine forbids it."""
        if not can_move(self.status, to):
            raise TransitionError(f"{self.id}: {self.status} -> {to}")
        times = {**self.times, f"{to}_at": int(now)}
        return dataclasses.replace(self, status=to, times=times, **changes)

    def data(self) -> bytes:
        """Everything but the indexed columns, as stored."""
        fields = dataclasses.asdict(self)
        for column in INDEXED:
            del fields[column]
        return orjson.dumps(fields)

    @classmethod
    def from_row(
        cls, *, id: str, tenant: str, status: str, kind: str,  # noqa: A002 - the column
        created_at: int, expires_at: int, data: bytes | str, attempts: int = 0, holds: int = 0,
    ) -> Job:  # fmt: skip
        fields = parse_json(data)
        return cls(id=id, tenant=tenant, status=status, kind=kind, created_at=created_at,
                   expires_at=expires_at, attempts=attempts, holds=holds, **fields)  # fmt: skip

    def wire(self, counts: Counts) -> dict[str, Any]:
        t = self.times
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": t.get("in_progress_at"),
            "expires_at": self.expires_at,
            "finalizing_at": t.get("finalizing_at"),
            "completed_at": t.get("completed_at"),
            "failed_at": t.get("failed_at"),
            "expired_at": t.get("expired_at"),
            "cancelling_at": t.get("cancelling_at"),
            "cancelled_at": t.get("cancelled_at"),
            "request_counts": {
                "total": counts.total,
                "completed": counts.ok,
                "failed": counts.failed,
            },
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class Usage:
    """What a tenant holds in the Batch API's storage, as its quotas count it."""

    files: int = 0
    bytes: int = 0  # its files' bytes, and what its open jobs hold in the job store
    open_jobs: dict[str, int] = field(default_factory=dict)  # by kind: batch, async


@dataclass(frozen=True, slots=True)
class Counts:
    total: int = 0
    ok: int = 0
    failed: int = 0

    @property
    def open(self) -> int:
        return self.total - self.ok - self.failed


@dataclass(frozen=True, slots=True)
class LineRow:
    """One input line as validated: `request` is the JSON body to send, or None when the line
    was refused at validation (then `result` is its error-file line already)."""

    idx: int
    custom_id: str
    request: bytes | None
    result: bytes | None = None


def not_after_of(fields: dict[str, Any]) -> float | None:
    """An async request's deadline from its job's stored fields (`extra.not_after`)."""
    extra = fields.get("extra")
    found = extra.get("not_after") if isinstance(extra, dict) else None
    return float(found) if isinstance(found, int | float) else None


@dataclass(frozen=True, slots=True)
class Claim:
    """A line this process holds the lease on: run it, then `finish` it."""

    job_id: str
    idx: int
    custom_id: str
    request: bytes
    attempts: int
    tenant: str
    endpoint: str
    key_id: str | None
    # An async request's own deadline (`x-levergate-deadline`, Unix seconds): the tier policy
    # plans its run for it (layers/tiers/).
    not_after: float | None = None
