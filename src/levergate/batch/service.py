"""`BatchService`: the Files and Batches APIs over the job store, and the runner that does the
work — built by the batch extension (batch/extension.py) when `batch.enabled`, served by
batch/http.py.

Everything a tenant names is looked up under its tenant: another tenant's file or batch is a
404, the same as one that never existed. Every client-controlled value is bounded here
(OpenAI's own bounds: `metadata` 16 pairs, keys 64 and values 512 characters; list `limit`
1-100 for batches, 1-10,000 for files) and refused with a 400 that names the field.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from levergate.batch.async_requests import AsyncRequests
from levergate.batch.defer import Deferral
from levergate.batch.execute import LineExecutor
from levergate.batch.files import Disk, receive
from levergate.batch.lines import FileBounds, scan_upload
from levergate.batch.model import ENDPOINTS, PURPOSES, Counts, FileRecord, Job, new_id
from levergate.batch.quotas import Quotas, Sweeper
from levergate.batch.runner import Runner
from levergate.batch.store import Store, answered
from levergate.batch.stores import open_store
from levergate.config.batch import BatchSettings
from levergate.errors import BadRequest, NotFound, Overloaded
from levergate.stores import select

if TYPE_CHECKING:
    from levergate.core.clock import Clock
    from levergate.extension import Host

METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512
EXPIRY_MIN, EXPIRY_MAX = 3600, 30 * 24 * 3600  # OpenAI's bounds on `expires_after.seconds`


class WallClock:
    """Unix time: leases and timestamps are compared across processes, so not monotonic."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class BatchService:
    def __init__(self, host: Host, *, clock: Clock | None = None) -> None:
        self.settings: BatchSettings = host.settings.batch
        where = select.batch_jobs(host.settings)
        self.store: Store = open_store(self.settings.store, where=where)
        self.disk = Disk(self.settings.dir)
        self.clock: Clock = clock or WallClock()
        self.runner = Runner(
            settings=self.settings, limits=host.settings.limits, store=self.store,
            disk=self.disk, execute=LineExecutor(host, settings=self.settings),
            clock=self.clock, interactive=host.interactive,
        )  # fmt: skip
        self._bounds = FileBounds(self.settings.max_lines, self.settings.max_line_bytes,
                                  self.settings.max_custom_id_chars)  # fmt: skip
        self.quotas = Quotas(settings=self.settings.quotas, store=self.store)
        self.sweeper = Sweeper(store=self.store, disk=self.disk, clock=self.clock,
                               every=self.settings.sweep_seconds)  # fmt: skip
        # Deferral and async requests: job kinds on this store and runner, each a job-level step
        # the runner asks before its own machine.
        s = host.settings
        self.deferral = (
            Deferral(host, store=self.store, clock=self.clock, disk=self.disk)
            if s.defer.enabled else None
        )  # fmt: skip
        self.async_requests: AsyncRequests | None = None
        if s.async_requests.enabled:
            self.async_requests = AsyncRequests(
                settings=s.async_requests, defer=s.defer, hooks=s.webhooks, store=self.store,
                clock=self.clock, deferral=self.deferral, limits=s.limits, quotas=self.quotas,
                tiers=(host.tiers, s.tiers) if s.tiers.enabled else None,
            )  # fmt: skip
            self.runner.steps.append(self.async_requests.step)
        if self.deferral is not None:
            self.runner.steps.append(self.deferral.step)

    async def aclose(self) -> None:
        for extension in (self.deferral, self.async_requests):
            if extension is not None:
                await extension.aclose()
        await self.store.aclose()

    # ---- files ----------------------------------------------------------------------------

    async def upload(
        self, chunks: AsyncIterator[bytes], *, content_type: str, tenant: str
    ) -> FileRecord:
        async with self.quotas.upload(tenant) as meter:
            upload = await receive(chunks, content_type=content_type, disk=self.disk,
                                   max_file_bytes=self.settings.max_file_bytes,
                                   meter=meter)  # fmt: skip
            try:
                _check_purpose(upload.purpose)
                await self.quotas.landed(tenant)
                now = int(self.clock.now())
                expires_at = _expiry(upload.fields, now=now,
                                     default=self.settings.file_expiry_seconds)  # fmt: skip
                lines = await asyncio.to_thread(scan_upload, upload.path, bounds=self._bounds)
                file_id = new_id("file").replace("_", "-", 1)
                record = FileRecord(file_id, tenant, upload.filename, upload.purpose,
                                    upload.size, now, lines, expires_at)  # fmt: skip
                await self.disk.keep(upload.temp, record.id)
            except BaseException:
                await self.disk.drop(upload.temp)
                raise
            try:
                await answered(self.store.add_file(record))
            except BaseException:
                await self.disk.discard(self.disk.path(record.id))
                raise
        return record

    async def file(self, file_id: str, *, tenant: str) -> FileRecord:
        record = await answered(self.store.get_file(file_id, tenant=tenant))
        if record is None:
            raise NotFound(f"No such File object: {file_id[:128]}", code="file_not_found")
        return record

    async def content(self, file_id: str, *, tenant: str) -> Path:
        await self.file(file_id, tenant=tenant)
        return self.disk.path(file_id)

    async def files(
        self, *, tenant: str, purpose: str | None, after: str | None, limit: int
    ) -> tuple[list[FileRecord], bool]:
        found = await answered(self.store.list_files(tenant=tenant, purpose=purpose, after=after,
                                                     limit=limit + 1))  # fmt: skip
        return found[:limit], len(found) > limit

    async def delete(self, file_id: str, *, tenant: str) -> None:
        if not await answered(self.store.delete_file(file_id, tenant=tenant)):
            raise NotFound(f"No such File object: {file_id[:128]}", code="file_not_found")
        await self.disk.discard(self.disk.path(file_id))

    # ---- batches --------------------------------------------------------------------------

    async def create(self, body: Any, *, tenant: str, key_id: str | None) -> Job:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        endpoint = body.get("endpoint")
        if endpoint not in ENDPOINTS:
            raise BadRequest(
                f"Unknown endpoint {str(endpoint)[:64]!r}: use one of {', '.join(ENDPOINTS)}.",
                code="invalid_endpoint", param="endpoint",
            )  # fmt: skip
        if body.get("completion_window") != "24h":
            raise BadRequest("'completion_window' must be \"24h\".", param="completion_window")
        metadata = _metadata(body.get("metadata"))
        file_id = body.get("input_file_id")
        if not isinstance(file_id, str) or not file_id:
            raise BadRequest("Missing required parameter: 'input_file_id'.", param="input_file_id")
        record = await self.file(file_id, tenant=tenant)
        if record.purpose != "batch":
            raise BadRequest("The input file must have purpose 'batch'.", param="input_file_id")
        # Its lines are copied into the job store while it runs: they count as stored bytes.
        await self.quotas.batch(tenant, size=record.bytes)
        now = int(self.clock.now())
        job = Job(id=new_id("batch"), tenant=tenant, status="validating", endpoint=endpoint,
                  input_file_id=file_id, created_at=now,
                  expires_at=now + self.settings.completion_window_seconds,
                  metadata=metadata, key_id=key_id, holds=record.bytes)  # fmt: skip
        await answered(self.store.add_job(job))
        self.runner.wake()
        return job

    async def get(self, batch_id: str, *, tenant: str) -> tuple[Job, Counts]:
        job = await answered(self.store.get_job(batch_id, tenant=tenant))
        if job is None or job.kind != "batch":
            raise NotFound(f"No such Batch object: {batch_id[:128]}", code="batch_not_found")
        return job, await answered(self.store.counts(job.id))

    async def batches(
        self, *, tenant: str, after: str | None, limit: int
    ) -> tuple[list[tuple[Job, Counts]], bool]:
        found = await answered(self.store.list_jobs(tenant=tenant, after=after, limit=limit + 1))
        shown = [(job, await answered(self.store.counts(job.id))) for job in found[:limit]]
        return shown, len(found) > limit

    async def cancel(self, batch_id: str, *, tenant: str) -> tuple[Job, Counts]:
        for _ in range(3):  # the runner may move it meanwhile: compare-and-set, then look again
            job, counts = await self.get(batch_id, tenant=tenant)
            if job.status in ("cancelling", "cancelled"):
                return job, counts
            if job.status not in ("validating", "in_progress"):
                raise BadRequest(f"A batch that is {job.status} cannot be cancelled.",
                                 code="invalid_state")  # fmt: skip
            moved = job.moved("cancelling", now=self.clock.now())
            if await answered(self.store.save(moved, expect=job.status)):
                self.runner.wake()
                return moved, counts
        raise Overloaded("The batch kept changing; try cancelling again.", retry_after=1.0)


def _check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise BadRequest(
            f"Unknown purpose {purpose[:64]!r}: this gateway takes 'batch' files.",
            code="invalid_purpose", param="purpose",
        )  # fmt: skip


def _expiry(fields: dict[str, bytes], *, now: int, default: int | None) -> int | None:
    """When an upload expires: its `expires_after` (OpenAI's shape, sent as the multipart
    fields `expires_after[anchor]` = "created_at" and `expires_after[seconds]` = 3600 to
    2592000), else `batch.file_expiry_seconds` after now (None: never)."""
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None if default is None else now + default
    if anchor != b"created_at":
        raise BadRequest("'expires_after[anchor]' must be \"created_at\".", param="expires_after")
    text = (seconds or b"").strip()
    if not text.isdigit() or not EXPIRY_MIN <= int(text) <= EXPIRY_MAX:
        raise BadRequest(
            f"'expires_after[seconds]' must be an integer from {EXPIRY_MIN} (1 hour) to "
            f"{EXPIRY_MAX} (30 days).",
            param="expires_after",
        )
    return now + int(text)


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > METADATA_PAIRS:
        raise BadRequest(f"'metadata' must be an object of at most {METADATA_PAIRS} pairs.",
                         param="metadata")  # fmt: skip
    for key, item in value.items():
        if len(key) > METADATA_KEY or not isinstance(item, str) or len(item) > METADATA_VALUE:
            raise BadRequest(
                f"'metadata' keys are strings of at most {METADATA_KEY} characters, values "
                f"strings of at most {METADATA_VALUE}.",
                param="metadata",
            )
    return dict(value)
