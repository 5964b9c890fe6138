"""Async single requests: submit one request, get an id at once (202), read the result later
(`GET /v1/async/{id}`) or be told by a signed webhook (levergate/webhooks.py).

An async request is a one-line job of kind `async` in the Batch API's store, so a restart
loses nothing: the line runs through the whole pipeline at priority `batch` (batch/execute.py)
— or, deferred, through the provider's batch API (batch/defer.py) — and this module's step of
the runner (`AsyncRequests.step`) finishes it: `finalizing` delivers the webhook, then the job
ends `completed` (no output files: the result is read from the line). Delivery is
at-least-once: each attempt is saved before it is made, retried with exponential backoff
(`webhooks.backoff_*`, capped) up to `webhooks.max_attempts`, the event `id` stable across
attempts for receivers to dedupe on.

How a request asks (server/handlers/async_requests.py): `POST /v1/async/chat/completions`
(or `/completions`, `/embeddings`), or the ordinary route with `x-levergate-async: true`;
`x-levergate-defer: 24h` or an `x-levergate-deadline` (Unix seconds) at least
`defer.min_deadline_seconds` away defers it; `x-levergate-webhook: <name>` picks a target from
`webhooks.targets`. A URL there is refused (400): targets come from config only (no SSRF).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from levergate.batch.model import ENDPOINTS, Job, LineRow, new_id
from levergate.config import AsyncRequests as AsyncSettings
from levergate.config import Defer, Webhooks
from levergate.errors import BadRequest, NotFound
from levergate.protocol.openai import check_body
from levergate.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, backoff, sign

if TYPE_CHECKING:
    from levergate.batch.defer import Deferral
    from levergate.batch.runner import Runner
    from levergate.batch.store import Store
    from levergate.core.clock import Clock

log = logging.getLogger("levergate.batch.async")
ASYNC_HEADER = "x-levergate-async"
DEFER_HEADER = "x-levergate-defer"
DEADLINE_HEADER = "x-levergate-deadline"
WEBHOOK_HEADER = "x-levergate-webhook"
CONTROL_HEADERS = (ASYNC_HEADER, DEFER_HEADER, DEADLINE_HEADER, WEBHOOK_HEADER)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
WINDOW = 24 * 3600


@dataclass(frozen=True, slots=True)
class Controls:
    """What a request's headers ask for."""

    asked: bool  # an async request at all
    defer: bool  # explicitly deferred (header or a far deadline)
    webhook: str | None


def controls(headers: Mapping[str, str], *, now: float, defer: Defer, hooks: Webhooks,
             dedicated: bool) -> Controls:  # fmt: skip
    """The async controls of a request, each validated (400 with the header's name)."""
    flag = headers.get(ASYNC_HEADER)
    if flag is not None and flag.lower() not in ("true", "1", "false", "0"):
        raise BadRequest(f"'{ASYNC_HEADER}' must be true or false.", param=ASYNC_HEADER)
    deferred = False
    if (window := headers.get(DEFER_HEADER)) is not None:
        if window != "24h":
            raise BadRequest(f"'{DEFER_HEADER}' must be \"24h\" (the providers' batch window).",
                             param=DEFER_HEADER)  # fmt: skip
        deferred = True
    if (deadline := headers.get(DEADLINE_HEADER)) is not None:
        if not deadline.isdigit() or len(deadline) > 12:
            raise BadRequest(f"'{DEADLINE_HEADER}' must be a Unix time in seconds.",
                             param=DEADLINE_HEADER)  # fmt: skip
        deferred = deferred or int(deadline) - now >= defer.min_deadline_seconds
    webhook = headers.get(WEBHOOK_HEADER)
    if webhook is not None:
        if "/" in webhook or ":" in webhook:
            raise BadRequest(
                f"'{WEBHOOK_HEADER}' names a webhook target from the gateway's config; URLs "
                "are not accepted.",
                code="webhook_url_not_allowed",
                param=WEBHOOK_HEADER,
            )
        if not _NAME.fullmatch(webhook) or webhook not in hooks.targets:
            raise BadRequest(f"Unknown webhook target {webhook[:64]!r}.",
                             code="unknown_webhook_target", param=WEBHOOK_HEADER)  # fmt: skip
    if "x-levergate-webhook-url" in headers:
        raise BadRequest(
            "Webhook URLs are not accepted; name a configured target.",
            code="webhook_url_not_allowed",
            param="x-levergate-webhook-url",
        )
    asked = dedicated or deferred or (flag or "").lower() in ("true", "1")
    if not asked and webhook is not None:
        raise BadRequest(f"'{WEBHOOK_HEADER}' is for async requests.", param=WEBHOOK_HEADER)
    return Controls(asked, deferred, webhook)


def asks_async(headers: Mapping[str, str]) -> bool:
    """Cheap check for the ordinary routes' hot path: any async control header at all."""
    return any(name in headers for name in CONTROL_HEADERS)


class AsyncRequests:
    def __init__(self, *, settings: AsyncSettings, defer: Defer, hooks: Webhooks, store: Store,
                 clock: Clock, deferral: Deferral | None, limits: Any) -> None:  # fmt: skip
        self.settings = settings
        self._defer = defer
        self._hooks = hooks
        self._store = store
        self._clock = clock
        self._deferral = deferral
        self._limits = limits
        self._http = httpx.AsyncClient()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(self, endpoint: str, body: Any, *, headers: Mapping[str, str], tenant: str,
                     key_id: str | None, dedicated: bool) -> Job:  # fmt: skip
        now = self._clock.now()
        asked = controls(headers, now=now, defer=self._defer, hooks=self._hooks,
                         dedicated=dedicated)  # fmt: skip
        if endpoint not in ENDPOINTS:
            raise BadRequest(f"{endpoint[:64]} cannot be run asynchronously.",
                             code="invalid_endpoint")  # fmt: skip
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        if body.get("stream") is True:
            raise BadRequest("An async request cannot be streamed ('stream': true).",
                             param="stream")  # fmt: skip
        check_body(ENDPOINTS[endpoint], body, limits=self._limits)
        deferred = self._deferred(endpoint, body, explicit=asked.defer)
        job_id = new_id("areq")
        extra: dict[str, Any] = {"request": body}
        if deferred:
            extra["defer"] = {"parts": None}
        if asked.webhook is not None:
            extra["webhook"] = {"target": asked.webhook, "attempts": 0, "state": "pending",
                                "event": new_id("evt")}  # fmt: skip
        job = Job(id=job_id, tenant=tenant, status="validating" if deferred else "in_progress",
                  endpoint=endpoint, input_file_id="", created_at=int(now),
                  expires_at=int(now) + WINDOW, kind="async", key_id=key_id,
                  times={} if deferred else {"in_progress_at": int(now)}, extra=extra)  # fmt: skip
        # The line first: a job in_progress with no line would look finished to the runner.
        await self._store.add_lines(job_id, [LineRow(0, "request", orjson.dumps(body))])
        await self._store.add_job(job)
        return job

    def _deferred(self, endpoint: str, body: dict[str, Any], *, explicit: bool) -> bool:
        d = self._deferral
        route = d.route(body, endpoint=endpoint) if d is not None and d.settings.enabled else None
        if explicit and route is None:
            why = (
                "deferral is off (defer.enabled)"
                if d is None or not d.settings.enabled
                else ("its model is not served by an upstream with a batch API for this endpoint")
            )
            raise BadRequest(f"This request cannot be deferred: {why}.", code="not_deferrable",
                             param=DEFER_HEADER)  # fmt: skip
        if explicit:
            return True
        policy = self._defer.routes.get(str(body.get("model")))
        return route is not None and policy is not None and policy.async_requests

    async def get(self, request_id: str, *, tenant: str) -> dict[str, Any]:
        job = await self._store.get_job(request_id, tenant=tenant)
        if job is None or job.kind != "async":
            raise NotFound(f"No such async request: {request_id[:128]}", code="not_found")
        return await self.wire(job)

    async def wire(self, job: Job) -> dict[str, Any]:
        counts = await self._store.counts(job.id)
        found = await self._store.results(job.id, ok=counts.ok > 0, after=-1, limit=1)
        line = orjson.loads(found[0][1]) if found else None
        status = "pending" if line is None else ("completed" if counts.ok else "failed")
        hook = job.extra.get("webhook")
        return {
            "id": job.id, "object": "async_request", "status": status,
            "endpoint": job.endpoint, "created_at": job.created_at,
            "completed_at": job.times.get("finalizing_at") if line else None,
            "deferred": "defer" in job.extra and job.extra["defer"] is not None,
            "response": line.get("response") if line else None,
            "error": line.get("error") if line else None,
            "webhook": None if not hook else {k: hook.get(k) for k in
                                              ("target", "state", "attempts")},
        }  # fmt: skip

    # ---- the runner's step ----------------------------------------------------------------

    async def step(self, job: Job, runner: Runner) -> bool | None:
        del runner
        if job.kind != "async" or job.status != "finalizing":
            return None  # in_progress -> finalizing is the batch machine's own move
        hook = job.extra.get("webhook")
        if isinstance(hook, dict) and hook.get("state") == "pending":
            if hook.get("next_at", 0.0) > self._clock.now():
                return False
            hook = await self._deliver(job, hook)
            changed = dataclasses.replace(job, extra={**job.extra, "webhook": hook})
            if hook["state"] == "pending":
                return await self._store.save(changed, expect=job.status)
            job = changed
        return await self._store.save(job.moved(job.end or "completed", now=self._clock.now()),
                                      expect="finalizing")  # fmt: skip

    async def _deliver(self, job: Job, hook: dict[str, Any]) -> dict[str, Any]:
        target = self._hooks.targets.get(hook["target"])
        attempts = int(hook.get("attempts", 0)) + 1
        if target is None or target.secret is None:  # removed from config since
            return {**hook, "state": "failed", "attempts": attempts, "reason": "unknown target"}
        now = int(self._clock.now())
        data = await self.wire(job)
        event = {"id": hook["event"], "object": "event", "created": now,
                 "type": f"async_request.{data['status']}", "data": data}  # fmt: skip
        body = orjson.dumps(event)
        headers = {"content-type": "application/json", EVENT_ID_HEADER: hook["event"],
                   SIGNATURE_HEADER: sign(target.secret.get_secret_value(), timestamp=now,
                                          body=body)}  # fmt: skip
        status = 0
        try:
            # The receiver's answer body is never read: only its status counts.
            async with self._http.stream("POST", target.url, content=body, headers=headers,
                                         timeout=target.timeout_seconds) as response:  # fmt: skip
                status = response.status_code
        except httpx.HTTPError as exc:
            log.warning("webhook %s for %s: %s", hook["target"], job.id, type(exc).__name__)
        if 200 <= status < 300:
            return {**hook, "state": "delivered", "attempts": attempts, "last_status": status}
        h = self._hooks
        if attempts >= h.max_attempts:
            return {**hook, "state": "failed", "attempts": attempts, "last_status": status}
        wait = backoff(attempts, base=h.backoff_base_seconds, factor=h.backoff_factor,
                       cap=h.backoff_max_seconds)  # fmt: skip
        return {**hook, "attempts": attempts, "last_status": status,
                "next_at": self._clock.now() + wait}  # fmt: skip
