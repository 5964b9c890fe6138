"""Per-tenant storage quotas of the Batch API, and the sweep that removes expired files.

Where in the stack: `BatchService` (batch/service.py) asks `Quotas` before it accepts an upload,
a batch or an async request (batch/async_requests.py); the answer is counted from the job
store (`Store.usage`: files, their bytes, open jobs and what they hold) plus this process's
uploads still arriving, so parallel uploads of one tenant cannot each see the same room. An
upload is metered as its bytes arrive and cut off (413) the moment it would pass the bytes
left, never stored whole first. Quotas are `batch.quotas` (config/batch.py); each refusal names
the setting.

`Sweeper` is a background job (one per process, run by the gateway's supervisor): at start and
every `batch.sweep_seconds` it deletes the files whose `expires_at` has passed (record first,
then bytes: a file is never listed without its content) and the temporary files of uploads
whose writer is gone (batch/files.py `Disk.sweep`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from levergate.batch.store import StoreError, answered
from levergate.errors import LevergateError, PayloadTooLarge, QuotaExceeded

if TYPE_CHECKING:
    from levergate.batch.files import Disk
    from levergate.batch.model import Usage
    from levergate.batch.store import Store
    from levergate.config import TenantQuotasSettings
    from levergate.core.clock import Clock

log = logging.getLogger("levergate.batch")
SETTING = "batch.quotas"
# Files deleted per sweep query (the sweep goes on until none is left).
SWEEP_PAGE = 100
# A temporary file being made (not yet locked and renamed to `.part`, a matter of microseconds)
# is swept only once this old: its writer died in between.
TEMP_GRACE_SECONDS = 60.0


@dataclass(slots=True)
class _Arriving:
    """This process's uploads still arriving, per tenant: how many, and their bytes so far."""

    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)


class Quotas:
    def __init__(self, *, settings: TenantQuotasSettings, store: Store) -> None:
        self._q = settings
        self._store = store
        self._arriving = _Arriving()

    async def _usage(self, tenant: str) -> Usage:
        return await answered(self._store.usage(tenant=tenant))

    @contextlib.asynccontextmanager
    async def upload(self, tenant: str) -> AsyncIterator[Callable[[int], None]]:
        """While an upload arrives: a meter to call with each piece's size, which raises 413
        once the tenant's bytes would pass `stored_bytes`. 429 at once when the tenant has
        `files` files already (counting its uploads arriving)."""
        used = await self._usage(tenant)
        a = self._arriving
        if used.files + a.files.get(tenant, 0) >= self._q.files:
            raise _count_over(used.files, self._q.files, what="files", name="files")
        counted = 0

        def meter(size: int) -> None:
            nonlocal counted
            counted += size
            a.bytes[tenant] = a.bytes.get(tenant, 0) + size
            if used.bytes + a.bytes[tenant] > self._q.stored_bytes:
                raise _too_large(used.bytes, self._q.stored_bytes)

        a.files[tenant] = a.files.get(tenant, 0) + 1
        try:
            yield meter
        finally:
            _less(a.files, tenant, 1)
            _less(a.bytes, tenant, counted)

    async def landed(self, tenant: str) -> None:
        """Before an upload that arrived whole is kept: counted again from the store, which now
        holds the uploads of this tenant that finished while it arrived (the meter's count was
        taken when it began)."""
        used = await self._usage(tenant)
        a = self._arriving
        others = a.files.get(tenant, 1) - 1
        if used.files + others >= self._q.files:
            raise _count_over(used.files, self._q.files, what="files", name="files")
        held = used.bytes + a.bytes.get(tenant, 0)  # this upload's bytes are among those arriving
        if held > self._q.stored_bytes:
            raise _too_large(used.bytes, self._q.stored_bytes)

    async def batch(self, tenant: str, *, size: int) -> None:
        """429 when the tenant has `queued_batches` open, or a batch over `size` bytes of input
        would pass `stored_bytes`."""
        used = await self._usage(tenant)
        queued = used.open_jobs.get("batch", 0)
        if queued >= self._q.queued_batches:
            raise _count_over(queued, self._q.queued_batches, what="unfinished batches",
                              name="queued_batches")  # fmt: skip
        self._fits(tenant, used, size)

    async def async_request(self, tenant: str, *, size: int) -> None:
        used = await self._usage(tenant)
        pending = used.open_jobs.get("async", 0)
        if pending >= self._q.pending_async_requests:
            raise _count_over(pending, self._q.pending_async_requests,
                              what="pending async requests",
                              name="pending_async_requests")  # fmt: skip
        self._fits(tenant, used, size)

    def _fits(self, tenant: str, used: Usage, size: int) -> None:
        held = used.bytes + self._arriving.bytes.get(tenant, 0)
        if held + size > self._q.stored_bytes:
            raise QuotaExceeded(
                f"This request's {size} bytes do not fit in the tenant's storage quota: it "
                f"holds {held} bytes of {self._q.stored_bytes} ({SETTING}.stored_bytes).",
                code="storage_quota_exceeded",
            )


def _too_large(held: int, quota: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file does not fit in the tenant's storage quota: it holds {held} bytes of "
        f"{quota} ({SETTING}.stored_bytes); delete files or let batches finish.",
        code="storage_quota_exceeded",
        param="file",
    )


def _count_over(held: int, quota: int, *, what: str, name: str) -> QuotaExceeded:
    return QuotaExceeded(
        f"The tenant has {held} {what}, its quota ({SETTING}.{name} = {quota}).",
        code=f"{name}_quota_exceeded",
    )


def _less(counts: dict[str, int], tenant: str, amount: int) -> None:
    left = counts.get(tenant, 0) - amount
    if left > 0:
        counts[tenant] = left
    else:
        counts.pop(tenant, None)


class Sweeper:
    def __init__(self, *, store: Store, disk: Disk, clock: Clock, every: float) -> None:
        self._store = store
        self._disk = disk
        self._clock = clock
        self._every = every

    async def run(self) -> None:
        while True:
            try:
                await self.sweep()
            except (StoreError, LevergateError, OSError) as exc:
                log.warning("batch: sweeping expired files: %s (will retry)", exc)
            await self._clock.sleep(self._every)

    async def sweep(self) -> int:
        """Delete every expired file and orphaned temporary file; how many files went."""
        removed = await self._disk.sweep(older_than=TEMP_GRACE_SECONDS)
        if removed:
            log.info("batch: removed %d orphaned temporary upload file(s)", removed)
        gone = 0
        while expired := await self._store.expired_files(now=self._clock.now(), limit=SWEEP_PAGE):
            for record in expired:
                gone += await self._store.delete_file(record.id, tenant=record.tenant)
                # Whoever deleted the record, the bytes go too (a replica may have died between).
                await self._disk.discard(self._disk.path(record.id))
        return gone
