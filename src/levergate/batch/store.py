"""The job-store seam: where files' records, jobs and their lines live between requests and
across crashes. Two implementations: SQLite (one process, the default: batch/stores/sqlite.py)
and PostgreSQL (several gateway processes sharing the work: batch/stores/postgres.py).

Three small protocols, one object implementing them all (one database, one connection):

- `FileIndex`: the records of uploaded and written files (their bytes are on disk).
- `JobStore`: jobs. `save` is a compare-and-set on the status, so a cancel from one replica
  and the runner of another never both win; `lease` hands a job that needs job-level work
  (validate, finalize, cancel, expire) to one process.
- `LineStore`: a job's lines. `claim` leases pending lines to a holder until a time (PostgreSQL:
  `FOR UPDATE SKIP LOCKED`, so replicas never wait on each other's rows); `renew` extends every
  lease a holder has (its heartbeat); a lease that lapses — its holder died — makes the line
  claimable again. `finish` writes a line's result only while the line is still pending, so a
  line has exactly one result however many holders ran it.

Times are Unix seconds from the caller (`now`), so the lease logic is tested on a ManualClock
and replicas on one machine agree.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Collection, Sequence
from typing import Protocol, TypeVar

from levergate.batch.model import Claim, Counts, FileRecord, Job, LineRow, Usage
from levergate.errors import Overloaded

log = logging.getLogger("levergate.batch")
T = TypeVar("T")


class StoreError(Exception):
    """The store could not answer (down, hung, locked, disk full); the work is retried, never
    lost."""


async def answered(work: Awaitable[T]) -> T:
    """A store call from a request: a store that cannot answer is a 503 with `Retry-After`,
    the detail logged (never a 500, never a hang: each store bounds its own calls)."""
    try:
        return await work
    except StoreError as exc:
        log.warning("batch store: %s", exc)
        raise Overloaded("The batch store is unavailable; try again.", code="store_unavailable",
                         retry_after=1.0) from None  # fmt: skip


class FileIndex(Protocol):
    async def add_file(self, record: FileRecord) -> None:
        """Write the record; a second write of the same id is a no-op (finalize may rerun)."""

    async def get_file(self, file_id: str, *, tenant: str | None) -> FileRecord | None: ...

    async def list_files(
        self, *, tenant: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        """Newest first, those older than `after`, at most `limit`."""

    async def delete_file(self, file_id: str, *, tenant: str) -> bool: ...

    async def expired_files(self, *, now: float, limit: int) -> list[FileRecord]:
        """Files whose `expires_at` is at or before `now`, soonest first, at most `limit`."""


class JobStore(Protocol):
    async def add_job(self, job: Job) -> None: ...

    async def get_job(self, job_id: str, *, tenant: str | None) -> Job | None: ...

    async def list_jobs(self, *, tenant: str, after: str | None, limit: int) -> list[Job]: ...

    async def save(self, job: Job, *, expect: str) -> bool:
        """Write `job` if its stored status is still `expect`; False if another got there first."""

    async def lease(
        self, *, holder: str, now: float, until: float, avoid: Collection[str] = ()
    ) -> Job | None:
        """A job that needs job-level work, leased to `holder` until `until`; jobs of the
        tenants in `avoid` only when no other tenant has one. Its `attempts` are counted up by
        one (durably: a process that dies mid-step leaves the count behind)."""

    async def release(self, job_id: str, *, holder: str, settled: bool = True) -> None:
        """Give the job's lease back; `settled` (its step ended as a step should, done or
        waiting) clears its `attempts`, otherwise they keep counting."""


class LineStore(Protocol):
    async def clear_lines(self, job_id: str) -> None: ...

    async def add_lines(self, job_id: str, rows: Sequence[LineRow]) -> None:
        """Rows with a request are pending; rows without one are finished errors already."""

    async def claimable(self, *, now: float) -> list[str]:
        """The tenants that have a line to claim (pending, unleased, its job in progress)."""

    async def claim(
        self, *, holder: str, now: float, until: float, limit: int, tenant: str | None = None
    ) -> list[Claim]:
        """Up to `limit` lines (of `tenant`'s jobs only, if given), oldest job first."""

    async def renew(self, *, holder: str, until: float) -> int:
        """Extend every lease (lines and jobs) `holder` has; the number of lines it holds."""

    async def retry_later(self, job_id: str, idx: int, *, holder: str, at: float) -> None:
        """Give a held line back, claimable again from `at`."""

    async def finish(self, job_id: str, results: Sequence[tuple[int, bool, bytes]]) -> int:
        """Write (idx, ok, result line) for lines still pending; how many were written."""

    async def unleased(self, job_id: str, *, now: float, limit: int) -> list[tuple[int, str]]:
        """(idx, custom_id) of pending lines no live lease holds (to cancel or expire them)."""

    async def counts(self, job_id: str) -> Counts: ...

    async def results(
        self, job_id: str, *, ok: bool, after: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """(idx, result line) of finished lines past `after`, in input order."""


class Store(FileIndex, JobStore, LineStore, Protocol):
    async def usage(self, *, tenant: str) -> Usage:
        """What `tenant` holds: its files, their bytes, its open jobs and what they hold."""

    async def aclose(self) -> None: ...
