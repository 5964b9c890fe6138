"""The batch runner: one background job per gateway process (`Gateway.start` runs it under the
supervisor), doing two things at once in one task group.

- Lines: claim up to `concurrency` pending lines under a lease, run each through the whole
  pipeline (`execute`: a `Call` at priority `batch`, so caches, key rights and the Limits
  layer's pacing apply, interactive traffic first), write its result. A retryable failure
  (429, 503, upstream down) gives the line back for later, up to `max_attempts`.
- Jobs: lease jobs that need job-level work and advance each through the status machine
  (batch/model.py): validate the input into lines, move a finished job to finalizing, close
  the unleased lines of a cancelled or expired job, and write the output and error files.

Fair across tenants, because one tenant's flood must not stall another's work. Free line
slots are shared max-min fairly among the tenants that have lines waiting
(policies/fair_share.py: the next slot to the tenant with the fewest lines in flight,
round-robin among equals), and no tenant holds more than `max_tenant_share` of them. Which
tenants have lines waiting is asked of the store once and reused while every claim gets all it
asked for, for up to `poll_seconds` (a job this process makes or steps, or a claim that comes
back short, asks again): a slot freed by one finished line is then one statement, not two (in
the soak, issue 20, the runner refilled its few interactive-time slots a line at a time, each
refill a round trip more on the loop client requests share). While
any client request is in flight on this process, the runner claims no more lines than
`share_while_interactive` of `concurrency` (core/interactive.py: interactive traffic first on
the loop both share); once none is, the full `concurrency` again. Job
steps run `job_workers` at once, a tenant's at most half of them, and a job of a tenant this
process is not busy with is leased first. Webhooks are delivered by their own workers
(batch/deliveries.py), never on this loop.

A heartbeat renews every lease this process holds every third of `lease_seconds`. A killed
process stops renewing: its lines come back to the queue when their leases lapse, and the
process that claims them next (itself after a restart, or a replica) runs them again. So a
crash loses no line, and re-runs at most the lines that were in flight (providers offer no
idempotency key on chat calls: a line in flight at the crash may have been answered — and
billed — once already). `finish` writes only over a pending line: one result per line.

Nothing one batch holds stops the runner for the others. A line whose run raises something
unexpected goes back to the queue like a retryable failure and, after `max_attempts` (crashes
of the process count: the store counts claims), becomes an error line that says so. A job step
that raises is parked for `retry_seconds` while the other jobs go on, and after
`max_job_attempts` tries in a row (the store counts them too, across restarts) the job ends
`failed` with the reason. Those two catch-alls are the runner's process edge: the traceback
goes to the log once per try, the tenant gets a reason without internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from levergate.batch.files import Disk
from levergate.batch.lines import FileBounds, error_line, read_rows
from levergate.batch.model import TERMINAL, Claim, FileRecord, Job
from levergate.batch.store import Store, StoreError
from levergate.config import RequestLimitsSettings
from levergate.config.batch import BatchSettings
from levergate.core.clock import Clock, timeout
from levergate.core.interactive import Interactive
from levergate.errors import LevergateError
from levergate.policies.fair_share import line_slots, rotated, shares

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
        settings: BatchSettings,
        limits: RequestLimitsSettings,
        store: Store,
        disk: Disk,
        execute: Execute,
        clock: Clock,
        steps: Sequence[Step] = (),
        interactive: Interactive | None = None,
    ) -> None:
        self._s = settings
        # Client requests in flight on this process: fewer lines meanwhile (line_slots).
        self._interactive = interactive or Interactive()

        self._limits = limits
        self._store = store
        self._disk = disk
        self._execute = execute
        self._clock = clock
        self.steps: list[Step] = list(steps)
        # A fresh holder per process start: a restarted gateway never mistakes its dead
        # predecessor's leases for its own, it waits for them to lapse like any replica.
        self.holder = f"{secrets.token_hex(6)}"
        self._inflight: dict[tuple[str, int], str] = {}  # line -> its tenant
        self._by_tenant: Counter[str] = Counter()
        self._tenant_cap = max(1, math.floor(settings.concurrency * settings.max_tenant_share))
        self._turn = 0
        # The tenants with lines waiting, as the store last said, and when (see `_claim`).
        self._waiting: tuple[list[str], float] | None = None
        self._wake = asyncio.Event()
        self._interactive.on_quiet(self._wake.set)
        self._stepping: dict[str, str] = {}  # job id -> tenant, for the job steps running
        self._step_done = asyncio.Event()
        # Jobs held back until a time; False: its step failed (its attempts keep counting).
        self._parked: dict[str, tuple[float, bool]] = {}
        self._bounds = FileBounds(settings.max_lines, settings.max_line_bytes,
                                  settings.max_custom_id_chars)  # fmt: skip

    def wake(self) -> None:
        """New work may be there (a batch created on this process): look now, not at the poll."""
        self._waiting = None
        self._wake.set()
        self._step_done.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._heartbeat())
                tasks.create_task(self._jobs(tasks))
                await self._lines(tasks)
        finally:
            # A clean stop hands this process's leases back at once instead of at their expiry.
            with contextlib.suppress(StoreError):
                await self._store.renew(holder=self.holder, until=0.0)

    # ---- lines ----------------------------------------------------------------------------

    async def _lines(self, tasks: asyncio.TaskGroup) -> None:
        while True:
            self._wake.clear()
            free = line_slots(concurrency=self._s.concurrency, in_flight=len(self._inflight),
                              interactive=self._interactive.in_flight,
                              share=self._s.share_while_interactive)  # fmt: skip
            claimed = await self._claim(free) if free > 0 else []
            for claim in claimed:
                self._inflight[(claim.job_id, claim.idx)] = claim.tenant
                self._by_tenant[claim.tenant] += 1
                tasks.create_task(self._one(claim))
            if not claimed or len(claimed) == free:
                with contextlib.suppress(TimeoutError):
                    async with timeout(self._clock, self._s.poll_seconds):
                        await self._wake.wait()

    async def _claim(self, free: int) -> list[Claim]:
        """Up to `free` lines, shared fairly across the tenants that have lines waiting."""
        now = self._clock.now()
        until = now + self._s.lease_seconds
        claimed: list[Claim] = []
        try:
            if self._waiting is None or now - self._waiting[1] >= self._s.poll_seconds:
                self._waiting = (await self._store.claimable(now=now), now)
            self._turn += 1
            plan = shares(free=free, waiting=rotated(self._waiting[0], self._turn),
                          inflight=self._by_tenant, cap=self._tenant_cap)  # fmt: skip
            for tenant, limit in plan.items():
                got = await self._store.claim(holder=self.holder, now=now, until=until,
                                              limit=limit, tenant=tenant)  # fmt: skip
                if len(got) < limit:
                    self._waiting = None  # that tenant ran out (or another holder took them)
                claimed += got
        except StoreError as exc:
            self._waiting = None
            log.warning("batch: cannot claim lines: %s", exc)
        except Exception:  # the runner's edge: a bad row must not stop every batch
            log.exception("batch: claiming lines failed")
        return claimed

    async def _one(self, claim: Claim) -> None:
        try:
            outcome = await self._run_line(claim)
            if isinstance(outcome, Later):
                at = self._clock.now() + outcome.seconds
                await self._store.retry_later(claim.job_id, claim.idx, holder=self.holder, at=at)
            else:
                await self._store.finish(claim.job_id, [(claim.idx, outcome.ok, outcome.result)])
        except StoreError as exc:
            # The line stays leased to us; the lease lapses and it runs again: never lost.
            log.warning("batch: cannot record line %s/%d: %s", claim.job_id, claim.idx, exc)
        finally:
            del self._inflight[(claim.job_id, claim.idx)]
            self._by_tenant[claim.tenant] -= 1
            if not self._by_tenant[claim.tenant]:
                del self._by_tenant[claim.tenant]
            self._wake.set()

    async def _run_line(self, claim: Claim) -> Done | Later:
        """The line's outcome; a line the process died on `max_attempts` times is not run
        again, and one whose run raises fails alone (after its attempts), never the runner."""
        line_id = f"{claim.job_id}-{claim.idx}"
        if claim.attempts > self._s.max_attempts:
            message = (f"The gateway stopped {claim.attempts - 1} times while running this "
                       f"request; it was not tried again (request {line_id}).")  # fmt: skip
            return Done(ok=False, result=error_line(claim.custom_id, code="attempts_exhausted",
                                                    message=message))  # fmt: skip
        try:
            return await self._execute(claim)
        except Exception as exc:  # the runner's edge: this line fails, the others run
            log.exception("batch: line %s raised (attempt %d)", line_id, claim.attempts)
            if claim.attempts < self._s.max_attempts:
                return Later(self._s.retry_seconds)
            message = (f"The gateway failed on this request {claim.attempts} times "
                       f"({type(exc).__name__}); its log has the details "
                       f"(request {line_id}).")  # fmt: skip
            return Done(ok=False, result=error_line(claim.custom_id, code="internal_error",
                                                    message=message))  # fmt: skip

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

    async def _jobs(self, tasks: asyncio.TaskGroup) -> None:
        while True:
            self._step_done.clear()
            now = self._clock.now()
            await self._unpark(now)
            job = await self._lease(now) if len(self._stepping) < self._s.job_workers else None
            if job is None:
                with contextlib.suppress(TimeoutError):
                    async with timeout(self._clock, self._s.poll_seconds):
                        await self._step_done.wait()
                continue
            self._stepping[job.id] = job.tenant
            tasks.create_task(self._step(job, now))

    async def _lease(self, now: float) -> Job | None:
        """The next job to step: a tenant's this process is not stepping first, and none of a
        tenant already holding half the job workers (it is handed back at once)."""
        busy = Counter(self._stepping.values())
        most = max(1, self._s.job_workers // 2)
        try:
            until = now + self._s.lease_seconds
            job = await self._store.lease(holder=self.holder, now=now, until=until,
                                          avoid=sorted(busy))  # fmt: skip
            if job is not None and busy[job.tenant] >= most:
                await self._store.release(job.id, holder=self.holder)
                return None
        except StoreError as exc:
            log.warning("batch: cannot lease a job: %s", exc)
            return None
        except Exception:  # the runner's edge: a bad row must not stop every batch
            log.exception("batch: leasing a job failed")
            return None
        return job

    async def _step(self, job: Job, now: float) -> None:
        try:
            await self._step_once(job, now)
        finally:
            del self._stepping[job.id]
            self._step_done.set()

    async def _step_once(self, job: Job, now: float) -> None:
        if job.attempts > self._s.max_job_attempts:  # its process died mid-step each time
            await self._give_up(job, f"the gateway stopped {job.attempts - 1} times while "
                                     "working on it")  # fmt: skip
            return
        try:
            progressed = await self.advance(job)
        except (StoreError, LevergateError) as exc:
            log.warning("batch %s: %s (will retry)", job.id, exc)
            progressed = False
        except Exception as exc:  # the runner's edge: this job fails, the others go on
            log.exception("batch %s: its %s step raised (attempt %d)", job.id, job.status,
                          job.attempts)  # fmt: skip
            if job.attempts >= self._s.max_job_attempts:
                why = f"its {job.status} step failed {job.attempts} times ({type(exc).__name__})"
                await self._give_up(job, why)
            else:
                self._parked[job.id] = (now + self._s.retry_seconds, False)
            return
        if progressed:
            with contextlib.suppress(StoreError):
                await self._store.release(job.id, holder=self.holder)
            self._waiting = None  # its lines may be claimable now
            self._wake.set()
        else:
            # Waiting on lines in flight: held (and renewed) for a poll, so the next lease
            # finds another job rather than this one again.
            self._parked[job.id] = (now + self._s.poll_seconds, True)

    async def _unpark(self, now: float) -> None:
        for job_id, (at, settled) in list(self._parked.items()):
            if at <= now:
                del self._parked[job_id]
                with contextlib.suppress(StoreError):
                    await self._store.release(job_id, holder=self.holder, settled=settled)

    async def _give_up(self, job: Job, why: str) -> None:
        """End a job whose step keeps failing: `failed` (`cancelled` if it was being
        cancelled) with the reason, and its lease back either way."""
        to = "cancelled" if job.status == "cancelling" else "failed"
        message = f"The gateway gave up on this batch: {why}; its log has the details."
        error = {"code": "batch_failed", "message": message, "param": None, "line": None}
        log.error("batch %s: %s; it ends %s", job.id, why, to)
        try:
            if job.status not in TERMINAL:
                await self._store.save(job.moved(to, now=self._clock.now(), errors=[error]),
                                       expect=job.status)  # fmt: skip
        except StoreError as exc:
            log.warning("batch %s: cannot end it: %s (will retry)", job.id, exc)
            self._parked[job.id] = (self._clock.now() + self._s.retry_seconds, False)
            return
        with contextlib.suppress(StoreError):
            await self._store.release(job.id, holder=self.holder)
        self._wake.set()

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
        now = int(self._clock.now())
        expiry = self._s.file_expiry_seconds
        record = FileRecord(file_id, job.tenant, name, "batch_output", size, now,
                            expires_at=None if expiry is None else now + expiry)  # fmt: skip
        await self._store.add_file(record)
        return file_id
