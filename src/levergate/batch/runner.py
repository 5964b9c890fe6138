"""The batch runner: one background job per gateway process (`Gateway.start` runs it under the
supervisor), doing two things at once in one task group.

- Lines: claim up to `concurrency` pending lines under a lease, run each through the whole
  pipeline (`execute`: a `Call` at priority `batch`, so caches, key rights and the Limits
  layer's pacing apply, interactive traffic first), write its result. A retryable failure
  (429, 503, upstream down) gives the line back for later, up to `max_attempts`.
- Jobs: lease one job that needs job-level work and advance it through the status machine
  (batch/model.py): validate the input into lines, move a finished job to finalizing, close
  the unleased lines of a cancelled or expired job, and write the output and error files.

A heartbeat renews every lease this process holds every third of `lease_seconds`. A killed
process stops renewing: its lines come back to the queue when their leases lapse, and the
process that claims them next (itself after a restart, or a replica) runs them again. So a
crash loses no line, and re-runs at most the lines that were in flight (providers offer no
idempotency key on chat calls: a line in flight at the crash may have been answered — and
billed — once already). `finish` writes only over a pending line: one result per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from levergate.batch.files import Disk
from levergate.batch.lines import FileBounds, error_line, read_rows
from levergate.batch.model import Claim, FileRecord, Job
from levergate.batch.store import Store, StoreError
from levergate.config import RequestLimits
from levergate.config.batch import Batch
from levergate.core.clock import Clock, timeout
from levergate.errors import LevergateError

log = logging.getLogger("levergate.batch")
PAGE = 1000
# The error code a line still open gets when its job ends without it.
CLOSED_BY = {"cancelled": "batch_cancelled", "expired": "batch_expired"}


@dataclass(frozen=True, slots=True)
class Done:
    ok: bool
    result: bytes  # the output-file or error-file line


@dataclass(frozen=True, slots=True)
class Later:
    """Run the line again after `seconds` (a retryable failure)."""

    seconds: float


Execute = Callable[[Claim], Awaitable[Done | Later]]
# A job-level step of a later job kind (deferral, async requests): True/False as `advance`,
# None when the job is not its to advance (then the next step, then the batch machine).
Step = Callable[[Job, "Runner"], Awaitable[bool | None]]


class Runner:
    def __init__(
        self,
        *,
        settings: Batch,
        limits: RequestLimits,
        store: Store,
        disk: Disk,
        execute: Execute,
        clock: Clock,
        steps: Sequence[Step] = (),
    ) -> None:
        self._s = settings
        self._limits = limits
        self._store = store
        self._disk = disk
        self._execute = execute
        self._clock = clock
        self.steps: list[Step] = list(steps)
        # A fresh holder per process start: a restarted gateway never mistakes its dead
        # predecessor's leases for its own, it waits for them to lapse like any replica.
        self.holder = f"{secrets.token_hex(6)}"
        self._inflight: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._parked: dict[str, float] = {}
        self._bounds = FileBounds(settings.max_lines, settings.max_line_bytes,
                                  settings.max_custom_id_chars)  # fmt: skip

    def wake(self) -> None:
        """New work may be there (a batch created on this process): look now, not at the poll."""
        self._wake.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._heartbeat())
                tasks.create_task(self._jobs())
                await self._lines(tasks)
        finally:
            # A clean stop hands this process's leases back at once instead of at their expiry.
            with contextlib.suppress(StoreError):
                await self._store.renew(holder=self.holder, until=0.0)

    # ---- lines ----------------------------------------------------------------------------

    async def _lines(self, tasks: asyncio.TaskGroup) -> None:
        while True:
            self._wake.clear()
            free = self._s.concurrency - len(self._inflight)
            claimed: list[Claim] = []
            if free > 0:
                now = self._clock.now()
                try:
                    claimed = await self._store.claim(
                        holder=self.holder, now=now, until=now + self._s.lease_seconds, limit=free
                    )
                except StoreError as exc:
                    log.warning("batch: cannot claim lines: %s", exc)
                for claim in claimed:
                    self._inflight.add((claim.job_id, claim.idx))
                    tasks.create_task(self._one(claim))
            if not claimed or len(claimed) == free:
                with contextlib.suppress(TimeoutError):
                    async with timeout(self._clock, self._s.poll_seconds):
                        await self._wake.wait()

    async def _one(self, claim: Claim) -> None:
        try:
            outcome = await self._execute(claim)
            if isinstance(outcome, Later):
                at = self._clock.now() + outcome.seconds
                await self._store.retry_later(claim.job_id, claim.idx, holder=self.holder, at=at)
            else:
                await self._store.finish(claim.job_id, [(claim.idx, outcome.ok, outcome.result)])
        except StoreError as exc:
            # The line stays leased to us; the lease lapses and it runs again: never lost.
            log.warning("batch: cannot record line %s/%d: %s", claim.job_id, claim.idx, exc)
        finally:
            self._inflight.discard((claim.job_id, claim.idx))
            self._wake.set()

    async def _heartbeat(self) -> None:
        while True:
            await self._clock.sleep(self._s.lease_seconds / 3)
            try:
                await self._store.renew(
                    holder=self.holder, until=self._clock.now() + self._s.lease_seconds
                )
            except StoreError as exc:
                log.warning("batch: cannot renew leases: %s", exc)

    # ---- jobs -----------------------------------------------------------------------------

    async def _jobs(self) -> None:
        while True:
            now = self._clock.now()
            for job_id, at in list(self._parked.items()):
                if at <= now:
                    del self._parked[job_id]
                    with contextlib.suppress(StoreError):
                        await self._store.release(job_id, holder=self.holder)
            try:
                job = await self._store.lease(
                    holder=self.holder, now=now, until=now + self._s.lease_seconds
                )
            except StoreError as exc:
                log.warning("batch: cannot lease a job: %s", exc)
                job = None
            if job is None:
                await self._clock.sleep(self._s.poll_seconds)
                continue
            try:
                progressed = await self.advance(job)
            except (StoreError, LevergateError) as exc:
                log.warning("batch %s: %s (will retry)", job.id, exc)
                progressed = False
            if progressed:
                with contextlib.suppress(StoreError):
                    await self._store.release(job.id, holder=self.holder)
                self._wake.set()
            else:
                # Waiting on lines in flight: held (and renewed) for a poll, so the next lease
                # finds another job rather than this one again.
                self._parked[job.id] = now + self._s.poll_seconds

    async def advance(self, job: Job) -> bool:
        """One step of `job` through the machine; False when it must wait for lines in flight."""
        for step in self.steps:
            if (done := await step(job, self)) is not None:
                return done
        now = self._clock.now()
        if job.status == "validating":
            await self._validate(job)
            return True
        if job.status == "in_progress":
            expired = now >= job.expires_at
            end = "expired" if expired else "completed"
            moved = job.moved("finalizing", now=now, end=end)
            return await self._store.save(moved, expect=job.status)
        # Cancelled while validating: every line still gets its (cancelled) error line.
        validated = job.status != "cancelling" or "in_progress_at" in job.times
        if not validated and not await self._load(job):
            return True
        return await self._finalize(job)

    async def finalize(self, job: Job) -> bool:
        """Close a finalizing or cancelling job: its open lines, its files, its end status."""
        return await self._finalize(job)

    async def _validate(self, job: Job) -> None:
        if await self._load(job):
            await self._store.save(job.moved("in_progress", now=self._clock.now()),
                                   expect=job.status)  # fmt: skip

    async def _load(self, job: Job) -> bool:
        """(Re)write the job's lines from its input file; False if the file is gone (then the
        job has failed, or a cancelled one is cancelled with no lines)."""
        now = self._clock.now()
        record = await self._store.get_file(job.input_file_id, tenant=job.tenant)
        path = self._disk.path(job.input_file_id)
        if record is None or not await asyncio.to_thread(path.exists):
            error = {"code": "file_not_found", "message": "The input file no longer exists.",
                     "param": "input_file_id", "line": None}  # fmt: skip
            to = "cancelled" if job.status == "cancelling" else "failed"
            await self._store.save(job.moved(to, now=now, errors=[error]), expect=job.status)
            return False
        await self._store.clear_lines(job.id)
        rows = read_rows(path, endpoint=job.endpoint, bounds=self._bounds, limits=self._limits,
                         chunk=PAGE)  # fmt: skip
        while (page := await asyncio.to_thread(next, rows, None)) is not None:
            await self._store.add_lines(job.id, page)
        return True

    async def _finalize(self, job: Job) -> bool:
        end = "cancelled" if job.status == "cancelling" else (job.end or "completed")
        if code := CLOSED_BY.get(end):
            await self._close_open(job, code=code)
        counts = await self._store.counts(job.id)
        if counts.open:
            return False
        output = await self._write(job, ok=True) if counts.ok else None
        errors = await self._write(job, ok=False) if counts.failed else None
        done = job.moved(end, now=self._clock.now(), output_file_id=output, error_file_id=errors)
        return await self._store.save(done, expect=job.status)

    async def _close_open(self, job: Job, *, code: str) -> None:
        why = {"batch_cancelled": "The batch was cancelled before this request ran.",
               "batch_expired": "The batch expired before this request ran."}[code]  # fmt: skip
        while True:
            now = self._clock.now()
            found = await self._store.unleased(job.id, now=now, limit=PAGE)
            if not found:
                return
            rows = [(idx, False, error_line(cid, code=code, message=why)) for idx, cid in found]
            await self._store.finish(job.id, rows)

    async def _write(self, job: Job, *, ok: bool) -> str:
        """The output (ok) or error file of `job`: deterministic ids, so a rerun rewrites it."""
        suffix = job.id.removeprefix("batch_")
        file_id = f"file-{'out' if ok else 'err'}-{suffix}"

        async def pages() -> AsyncIterator[list[bytes]]:
            after = -1
            while page := await self._store.results(job.id, ok=ok, after=after, limit=PAGE):
                yield [line for _, line in page]
                after = page[-1][0]

        size = await self._disk.write_lines(file_id, pages)
        name = f"{job.id}_{'output' if ok else 'error'}.jsonl"
        record = FileRecord(file_id, job.tenant, name, "batch_output", size,
                            int(self._clock.now()))  # fmt: skip
        await self._store.add_file(record)
        return file_id
