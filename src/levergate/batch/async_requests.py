"""Async single requests: submit one request, get an id at once (202), read the result later
(`GET /v1/async/{id}`) or be told by a signed webhook (levergate/webhooks.py).

An async request is a one-line job of kind `async` in the Batch API's store, so a restart
loses nothing: the line runs through the whole pipeline at priority `batch` (batch/execute.py)
— or, deferred, through the provider's batch API (batch/defer.py) — and this module's step of
the runner (`AsyncRequests.step`) finishes it: `finalizing` hands the webhook to its own
workers (batch/deliveries.py, never the job loop), then the job ends `completed` (no output
files: the result is read from the line). Delivery is at-least-once: each attempt is saved
before it is made, retried with exponential backoff (`webhooks.backoff_*`, capped) up to
`webhooks.max_attempts`, the event `id` stable across attempts for receivers to dedupe on.

How a request asks (batch/http.py; the edge parses the headers into `Controls.run_async`,
levergate/control_headers.py): `POST /v1/async/chat/completions`
(or `/completions`, `/embeddings`), or the ordinary route with `x-levergate-async: true`;
`x-levergate-defer: 24h` defers it; an `x-levergate-deadline` (Unix seconds) defers it when the
provider's batch API is the cheapest tier that meets it (`tiers.enabled`: policies/tiers.py,
by the batch tier's observed turnaround), else (tiers off) when it is at least
`defer.min_deadline_seconds` away; a request not deferred runs with that deadline, so the tier
policy can still send it at flex. `x-levergate-webhook: <name>` picks a target from
`webhooks.targets`. A URL there is refused (400): targets come from config only (no SSRF).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from levergate.batch.deliveries import Deliveries
from levergate.batch.model import ASYNC_PREFIX, ENDPOINTS, Job, LineRow, new_id
from levergate.batch.store import answered
from levergate.config import AsyncRequestsSettings, DeferSettings, WebhooksSettings
from levergate.control_headers import DEADLINE_HEADER, DEFER_HEADER, WEBHOOK_HEADER
from levergate.core.controls import AsyncAsk
from levergate.core.json_bound import parse_json
from levergate.errors import BadRequest, NotFound
from levergate.policies.tiers import Ask, Tier, choose
from levergate.protocol.openai.body import check_body

if TYPE_CHECKING:
    from levergate.batch.defer import Deferral
    from levergate.batch.quotas import Quotas
    from levergate.batch.runner import Runner
    from levergate.batch.store import Store
    from levergate.config import TiersSettings
    from levergate.core.clock import Clock
    from levergate.layers.tiers.book import TierBook

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
WINDOW = 24 * 3600


@dataclass(frozen=True, slots=True)
class Controls:
    """What a request's async controls come to on this gateway."""

    asked: bool  # an async request at all
    defer: bool  # explicitly deferred (header or a far deadline)
    webhook: str | None


def controls(ask: AsyncAsk, *, now: float, defer: DeferSettings, hooks: WebhooksSettings,
             dedicated: bool, by_policy: bool = False) -> Controls:  # fmt: skip
    """Judge the async controls the edge parsed (control_headers.async_ask checked each one's
    shape): the webhook target must be configured, and a deadline far enough away defers
    (`by_policy`: the tier policy judges the deadline instead, `AsyncRequests`)."""
    far = ask.not_after is not None and ask.not_after - now >= defer.min_deadline_seconds
    deferred = ask.defer or (far and not by_policy)
    webhook = ask.webhook
    if webhook is not None and (not _NAME.fullmatch(webhook) or webhook not in hooks.targets):
        raise BadRequest(f"Unknown webhook target {webhook[:64]!r}.",
                         code="unknown_webhook_target", param=WEBHOOK_HEADER)  # fmt: skip
    asked = dedicated or deferred or ask.asked or (by_policy and ask.not_after is not None)
    if not asked and webhook is not None:
        raise BadRequest(f"'{WEBHOOK_HEADER}' is for async requests.", param=WEBHOOK_HEADER)
    return Controls(asked, deferred, webhook)


class AsyncRequests:
    def __init__(self, *, settings: AsyncRequestsSettings, defer: DeferSettings, hooks:
    WebhooksSettings, store: Store,
                 clock: Clock, deferral: Deferral | None, limits: Any,
                 quotas: Quotas, tiers: tuple[TierBook, TiersSettings] | None = None,
                 ) -> None:  # fmt: skip
        self.settings = settings
        # The tier policy, when on: it decides whether a deadline defers (`_batch_chosen`).
        self._tiers = tiers
        self._quotas = quotas
        self._defer = defer
        self._hooks = hooks
        self._store = store
        self._clock = clock
        self._deferral = deferral
        self._limits = limits
        self.deliveries = Deliveries(hooks=hooks, store=store, clock=clock, wire=self.wire)

    async def aclose(self) -> None:
        await self.deliveries.aclose()

    async def submit(self, endpoint: str, body: Any, *, ask: AsyncAsk, tenant: str,
                     key_id: str | None, dedicated: bool) -> Job:  # fmt: skip
        now = self._clock.now()
        asked = controls(ask, now=now, defer=self._defer, hooks=self._hooks,
                         dedicated=dedicated, by_policy=self._tiers is not None)  # fmt: skip
        if endpoint not in ENDPOINTS:
            raise BadRequest(f"{endpoint[:64]} cannot be run asynchronously.",
                             code="invalid_endpoint")  # fmt: skip
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        if body.get("stream") is True:
            raise BadRequest("An async request cannot be streamed ('stream': true).",
                             param="stream")  # fmt: skip
        check_body(ENDPOINTS[endpoint], body, limits=self._limits)
        left = None if ask.not_after is None else ask.not_after - now
        if left is not None and left <= 0:
            raise BadRequest(f"'{DEADLINE_HEADER}' is in the past: no answer can meet it.",
                             code="invalid_header_value", param=DEADLINE_HEADER)  # fmt: skip
        deferred = self._deferred(endpoint, body, explicit=asked.defer, left=left)
        request = orjson.dumps(body)
        await self._quotas.async_request(tenant, size=len(request))
        job_id = new_id(ASYNC_PREFIX.rstrip("_"))
        extra: dict[str, Any] = {"request": body}
        if ask.not_after is not None:
            extra["not_after"] = ask.not_after
        if deferred:
            extra["defer"] = {"parts": None}
        if asked.webhook is not None:
            extra["webhook"] = {"target": asked.webhook, "attempts": 0, "state": "pending",
                                "event": new_id("evt")}  # fmt: skip
        job = Job(id=job_id, tenant=tenant, status="validating" if deferred else "in_progress",
                  endpoint=endpoint, input_file_id="", created_at=int(now),
                  expires_at=int(now) + WINDOW, kind="async", key_id=key_id,
                  times={} if deferred else {"in_progress_at": int(now)}, extra=extra,
                  holds=len(request))  # fmt: skip
        # The line first: a job in_progress with no line would look finished to the runner.
        await answered(self._store.add_lines(job_id, [LineRow(0, "request", request)]))
        await answered(self._store.add_job(job))
        return job

    def _deferred(
        self, endpoint: str, body: dict[str, Any], *, explicit: bool, left: float | None
    ) -> bool:
        d = self._deferral
        target = d.target(body, endpoint=endpoint) if d is not None and d.settings.enabled else None
        if explicit and target is None:
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
        if target is not None and policy is not None and policy.async_requests:
            return True
        return target is not None and left is not None and self._batch_chosen(body, left)

    def _batch_chosen(self, body: dict[str, Any], left: float) -> bool:
        """The tier policy picks the provider's batch API for this deadline: cheapest in time
        (flex at the same price wins the tie: it answers sooner)."""
        if self._tiers is None or body.get("service_tier") is not None:
            return False  # off, or the client named its tier: that is what it gets
        book, settings = self._tiers
        alias = str(body.get("model"))
        route = settings.route(alias)
        if not route.choose:
            return False
        options = book.options(alias, model=alias, body=body,
                               tiers=(Tier.BATCH, Tier.FLEX, Tier.STANDARD))  # fmt: skip
        choice = choose(options, Ask(left, interactive=False, ceiling=Tier(route.ceiling)))
        return choice.tier is Tier.BATCH

    async def get(self, request_id: str, *, tenant: str) -> dict[str, Any]:
        job = await answered(self._store.get_job(request_id, tenant=tenant))
        if job is None or job.kind != "async":
            raise NotFound(f"No such async request: {request_id[:128]}", code="not_found")
        return await self.wire(job)

    async def wire(self, job: Job) -> dict[str, Any]:
        counts = await answered(self._store.counts(job.id))
        found = await answered(self._store.results(job.id, ok=counts.ok > 0, after=-1, limit=1))
        line = parse_json(found[0][1]) if found else None
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
            # Its workers move the job on once the notice is delivered or given up.
            if hook.get("next_at", 0.0) <= self._clock.now():
                self.deliveries.offer(job)
            return False
        return await self._store.save(job.moved(job.end or "completed", now=self._clock.now()),
                                      expect="finalizing")  # fmt: skip
