"""Webhook deliveries, off the job loop: the async-request step (batch/async_requests.py) only
offers a finished request's notice here and moves on; `workers` tasks post the notices.

Why its own workers: a delivery is an HTTP exchange with a receiver the gateway does not
control. Made on the runner's job loop, one hanging receiver held every tenant's job steps
for its whole timeout, attempt after attempt (a 1-line batch took 201 s instead of 1 s).

Bounds: at most `webhooks.queue` notices wait and `webhooks.workers` are in flight; a target
holds at most half the workers (queued and in flight), so one dead receiver leaves the others
served; each attempt ends at its target's `timeout_seconds` over the whole exchange (connect,
send, the answer's head), not only per read. An offer that does not fit is refused and offered
again at the runner's next look: the notice's state lives in the job, never only here.

Durable, at-least-once: the job stays `finalizing` until its notice is delivered or given
up. Each attempt is saved before it is made, with the time its outcome is due (`next_at`), so
no process offers it again meanwhile; a crash mid-attempt leaves it due at that time, when the
next look offers it again. The outcome is saved after (the next attempt's time, by
`webhooks.backoff_*`, or the end: the job moves on to its end status).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from levergate.batch.store import StoreError
from levergate.core.clock import timeout
from levergate.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, backoff, sign

if TYPE_CHECKING:
    from levergate.batch.model import Job
    from levergate.batch.store import Store
    from levergate.config import WebhooksSettings
    from levergate.core.clock import Clock

log = logging.getLogger("levergate.batch.webhooks")
# Beyond the target's timeout before an attempt's outcome is due: the slack a worker needs to
# save it once the exchange has ended.
SLACK_SECONDS = 5.0
Wire = Callable[["Job"], Awaitable[dict[str, Any]]]


class Deliveries:
    def __init__(self, *, hooks: WebhooksSettings, store: Store, clock: Clock, wire: Wire) -> None:
        self._hooks = hooks
        self._store = store
        self._clock = clock
        self._wire = wire  # the notice's `data`: the request as `GET /v1/async/{id}` shows it
        self._queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=hooks.queue)
        self._taken: set[str] = set()  # job ids queued or in flight here
        self._per_target: Counter[str] = Counter()
        self._target_most = max(1, hooks.workers // 2)
        self._http = httpx.AsyncClient()

    async def aclose(self) -> None:
        await self._http.aclose()

    def offer(self, job: Job) -> bool:
        """Queue the notice of `job` (its webhook state pending and due); False when it cannot
        be taken now (the queue or its target's share is full): offer it again later."""
        if job.id in self._taken:
            return True
        target = str(job.extra["webhook"]["target"])
        if self._per_target[target] >= self._target_most or self._queue.full():
            return False
        self._queue.put_nowait(job)
        self._taken.add(job.id)
        self._per_target[target] += 1
        return True

    async def run(self) -> None:
        """The workers; a background job of the gateway (BatchService.jobs)."""
        async with asyncio.TaskGroup() as tasks:
            for _ in range(self._hooks.workers):
                tasks.create_task(self._work())

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self.attempt(job)
            except StoreError as exc:
                # Nothing lost: the job is still finalizing with its notice pending.
                log.warning("webhook for %s: cannot save its state: %s", job.id, exc)
            finally:
                self._taken.discard(job.id)
                target = str(job.extra["webhook"]["target"])
                self._per_target[target] -= 1
                if not self._per_target[target]:
                    del self._per_target[target]

    async def attempt(self, job: Job) -> None:
        """One delivery attempt of `job`'s notice, its state saved before and after; nothing
        if, read again, it is no longer pending and due (another process got there first)."""
        current = await self._store.get_job(job.id, tenant=None)
        if current is None or current.status != "finalizing":
            return
        job = current
        hook: dict[str, Any] = job.extra.get("webhook") or {}
        if hook.get("state") != "pending" or hook.get("next_at", 0.0) > self._clock.now():
            return
        target = self._hooks.targets.get(hook["target"])
        attempts = int(hook.get("attempts", 0)) + 1
        if target is None or target.secret is None:  # removed from config since
            await self._end(job, {**hook, "state": "failed", "attempts": attempts,
                                  "reason": "unknown target"})  # fmt: skip
            return
        due = self._clock.now() + target.timeout_seconds + SLACK_SECONDS
        sending = {**hook, "attempts": attempts, "next_at": due}
        job = dataclasses.replace(job, extra={**job.extra, "webhook": sending})
        if not await self._store.save(job, expect="finalizing"):
            return  # another process got there first
        secret = target.secret.get_secret_value()
        status = await self._post(job, hook, url=target.url, secret=secret,
                                  seconds=target.timeout_seconds)  # fmt: skip
        if 200 <= status < 300:
            await self._end(job, {**sending, "state": "delivered", "last_status": status})
            return
        h = self._hooks
        if attempts >= h.max_attempts:
            await self._end(job, {**sending, "state": "failed", "last_status": status})
            return
        wait = backoff(attempts, base=h.backoff_base_seconds, factor=h.backoff_factor,
                       cap=h.backoff_max_seconds)  # fmt: skip
        later = {**sending, "last_status": status, "next_at": self._clock.now() + wait}
        await self._store.save(dataclasses.replace(job, extra={**job.extra, "webhook": later}),
                               expect="finalizing")  # fmt: skip

    async def _post(self, job: Job, hook: dict[str, Any], *, url: str, secret: str,
                    seconds: float) -> int:  # fmt: skip
        """One signed POST; the receiver's status, 0 when it failed or ran out of time."""
        now = int(self._clock.now())
        data = await self._wire(job)
        event = {"id": hook["event"], "object": "event", "created": now,
                 "type": f"async_request.{data['status']}", "data": data}  # fmt: skip
        body = orjson.dumps(event)
        headers = {"content-type": "application/json", EVENT_ID_HEADER: hook["event"],
                   SIGNATURE_HEADER: sign(secret, timestamp=now, body=body)}  # fmt: skip
        try:
            # The receiver's answer body is never read: only its status counts.
            async with (
                timeout(self._clock, seconds),
                self._http.stream("POST", url, content=body, headers=headers,
                                  timeout=seconds) as response,
            ):  # fmt: skip
                return response.status_code
        except (httpx.HTTPError, TimeoutError) as exc:
            log.warning("webhook %s for %s: %s", hook["target"], job.id, type(exc).__name__)
        return 0

    async def _end(self, job: Job, hook: dict[str, Any]) -> None:
        """The notice is done with (delivered or given up): the job moves to its end status."""
        done = dataclasses.replace(job, extra={**job.extra, "webhook": hook})
        await self._store.save(done.moved(job.end or "completed", now=self._clock.now()),
                               expect="finalizing")  # fmt: skip
