"""Shadow samples: an accepted cheap answer, answered again by the cascade's strongest step off
the request path, and the two compared — the measurement behind `levergate_cascade_quality_
retention` (policies/shadow.py has the formula and what agreement does and does not prove).

When a cascade accepts a step's answer, `Shadows.offer` draws from its own seeded random source
(`Shared.rng`, so a test replays the draws) and, with probability `shadow.rate`, puts a sample on
one bounded queue; a full queue drops the sample and counts it (`result="dropped"`), so the
request path never waits and memory stays bounded by `shadow.queue` samples (each holds the
request's body, already bounded at the edge, and the accepted text). The client's answer has
gone out before the sample is taken from the queue. An answer with no text (a tool call) is not
sampled: there is nothing to compare.

The queue's workers (`shadow.concurrency`) run as one background `Job` under the pipeline's
Supervisor; the Gateway cancels them when it closes, and samples still queued are discarded
then. Each sample is one call to the strongest step with the client's body, whole (never
streamed), through the same service the cascade's steps go through: the alias's fallbacks,
retries, balancing and limits apply. It runs under a fresh `Context` of its own — the client's
request is finished and its record (`Trace`) already measured, so nothing may write to it —
with the request's tenant and feature, batch priority (interactive traffic goes first wherever
priority counts) and a deadline of `shadow.timeout_seconds`. With `compare: judge` a second call
asks the judge alias whether the two answers are equivalent.

Every shadow call is paid for, and priced into the ledger as `levergate_spend_usd{kind="shadow"}`
under the request's tenant and feature (`OwnSpend`), never into the request's own cost.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from levergate.core.call import Call, Context, Priority, Spend
from levergate.core.jobs import Job
from levergate.errors import LevergateError
from levergate.layers.cache.replay import whole
from levergate.layers.cascade.metrics import AGREE, DISAGREE, DROPPED, FAILED, CascadeMetrics
from levergate.policies.confidence import answer_text
from levergate.policies.pricing import from_usage
from levergate.policies.shadow import agree, equivalence_messages, equivalence_score

if TYPE_CHECKING:
    from levergate.config.cascade import Shadow, ShadowSampling
    from levergate.core.clock import Clock
    from levergate.core.reply import Completed
    from levergate.core.service import Service
    from levergate.layers.cascade.plan import Plan
    from levergate.layers.measure.ledger import OwnSpend
    from levergate.layers.shared import Shared

JOB_NAME = "cascade_shadow"


@dataclass(frozen=True, slots=True)
class Sample:
    """One accepted answer to shadow: what is needed once the request is gone."""

    label: str  # the cascade's metric label
    strongest: str
    sampling: ShadowSampling
    body: Mapping[str, Any]  # the client's body, for the strongest step, whole
    cheap: str  # the accepted answer's text
    request_id: str
    tenant: str
    feature: str


class Shadows:
    @classmethod
    def build(cls, settings: Shadow, *, shared: Shared, metrics: CascadeMetrics) -> Shadows:
        """The queue, with its workers registered as a background job of the pipeline."""
        shadows = cls(settings, metrics=metrics, clock=shared.clock, rng=shared.rng(),
                      spend=shared.own_spend)  # fmt: skip
        shared.jobs.append(Job(JOB_NAME, shadows.run))
        return shadows

    def __init__(
        self,
        settings: Shadow,
        *,
        metrics: CascadeMetrics,
        clock: Clock,
        rng: random.Random,
        spend: OwnSpend,
    ) -> None:
        self._queue: asyncio.Queue[Sample] = asyncio.Queue(maxsize=settings.queue)
        self._concurrency = settings.concurrency
        self._timeout = settings.timeout_seconds
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        self._spend = spend
        self._inner: Service | None = None

    def bind(self, inner: Service) -> None:
        """The service the cascade's steps go through (known once the layer wraps it)."""
        self._inner = inner

    def offer(self, call: Call, plan: Plan, answer: Mapping[str, Any]) -> None:
        """Maybe shadow `answer`, the step's accepted answer to `call`. Never waits."""
        rate = plan.shadow.rate
        if rate <= 0 or self._rng.random() >= rate:
            return
        cheap = answer_text(answer)
        if cheap is None:  # a tool call, a refusal: no text to compare, nothing to pay for
            return
        body = {k: v for k, v in call.body.items() if k not in ("stream", "stream_options")}
        body["model"] = plan.strongest
        ctx = call.ctx
        sample = Sample(plan.label, plan.strongest, plan.shadow, body, cheap,
                        ctx.request_id, ctx.tenant, ctx.feature)  # fmt: skip
        try:
            self._queue.put_nowait(sample)
        except asyncio.QueueFull:
            self._metrics.shadowed(plan.label, DROPPED)

    async def run(self) -> None:
        """The workers, until cancelled (the Job)."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._concurrency):
                group.create_task(self._work())

    async def _work(self) -> None:
        while True:
            sample = await self._queue.get()
            self._metrics.shadowed(sample.label, await self.compare(sample))

    async def compare(self, sample: Sample) -> str:
        """AGREE or DISAGREE; FAILED when a call failed or the judge gave no verdict."""
        deadline = self._clock.now() + self._timeout
        try:
            strong = answer_text((await self._call(sample, sample.body, deadline)).data)
            if strong is None:
                return FAILED
            if sample.sampling.compare == "judge":
                same = await self._judged(sample, strong, deadline)
            else:
                same = agree(sample.cheap, strong)
        except LevergateError:
            return FAILED
        if same is None:
            return FAILED
        return AGREE if same else DISAGREE

    async def _judged(self, sample: Sample, strong: str, deadline: float) -> bool | None:
        s = sample.sampling
        if s.judge is None:  # pragma: no cover - ShadowSampling refuses compare=judge without
            return None
        messages = equivalence_messages(sample.body.get("messages") or [], sample.cheap, strong,
                                        max_chars=s.judge_max_chars)  # fmt: skip
        body = {"model": s.judge, "messages": messages, "max_tokens": s.judge_max_tokens,
                "temperature": 0}  # fmt: skip
        score = equivalence_score(answer_text((await self._call(sample, body, deadline)).data))
        return None if score is None else score >= s.judge_threshold

    async def _call(self, sample: Sample, body: Mapping[str, Any], deadline: float) -> Completed:
        """One shadow call under a context of its own, its usage charged as kind=shadow."""
        if self._inner is None:
            raise RuntimeError("the shadow queue was never bound to a service")
        ctx = Context(
            request_id=f"shadow-{sample.request_id}", tenant=sample.tenant,
            priority=Priority.BATCH, deadline=deadline, feature=sample.feature,
        )  # fmt: skip
        reply = await whole(await self._inner(Call(kind="chat", body=body, ctx=ctx)))
        t = from_usage(reply.usage)
        spend = Spend(str(body["model"]), "shadow", input_uncached=t.input_uncached,
                      cached_read=t.cached_read, cache_write=t.cache_write,
                      output=t.output)  # fmt: skip
        self._spend.charge(spend, tenant=sample.tenant, feature=sample.feature)
        return reply
