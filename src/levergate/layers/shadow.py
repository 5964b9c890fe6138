"""Shadow samples: a cheap answer the client got, answered again by the strong alias it stood in
for, off the request path, and the two compared — the measurement behind each lever's quality
retention gauge (policies/shadow.py has the formula and what agreement does and does not prove).

Two levers answer with a cheaper model than the one that would otherwise have answered: a
cascade that accepts an early step (layers/cascade/shadow.py) and a route that chose an alias
other than its default (layers/route_shadow.py). Each builds one `ShadowQueue` (one per layer:
its own bounded queue, workers, deadline and seeded random source, so one lever's draws and
backlog never change the other's) and says what it offers; this module holds what they share —
the queue, the workers, the shadow calls, the comparison and the `ShadowMeter` series.

A layer draws (`drawn`) from its queue's own seeded random source (`Shared.rng`, so a test
replays the draws) and, with probability `sampling.rate`, puts a sample on the bounded queue
(`put`); a full queue drops the sample and counts it (`result="dropped"`), so the request path
never waits and memory stays bounded by `queue` samples (each holds the request's body, already
bounded at the edge, and the cheap answer's text). The client's answer has gone out before the
sample is taken from the queue.

The queue's workers (`concurrency`) run as one background `BackgroundJob` under the pipeline's
Supervisor; the Gateway cancels them when it closes, and samples still queued are discarded then.
Each sample is one call to the strong alias with the client's body, whole (never streamed, one
choice), through the service the layer's own calls go through: the alias's fallbacks, retries,
balancing and limits apply. It runs under a fresh `Context` of its own — the client's request is
finished and its record (`Trace`) already measured, so nothing may write to it — with the
request's tenant and feature, batch priority (interactive traffic goes first wherever priority
counts) and a deadline of `timeout_seconds`. With `compare: judge` a second call asks the judge
alias whether the two answers are equivalent.

Every shadow call is paid for, and priced into the ledger as `levergate_spend_usd{kind="shadow"}`
under the request's tenant and feature (`OwnSpend`), never into the request's own cost.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from prometheus_client import CollectorRegistry, Counter, Gauge

from levergate.core.call import Call, Context
from levergate.core.controls import Controls, Principal, Priority
from levergate.core.jobs import BackgroundJob
from levergate.errors import LevergateError
from levergate.layers.cache.replay import whole
from levergate.layers.measure.shadow_labels import ShadowLabel, ShadowLabels
from levergate.policies.confidence import answer_text
from levergate.policies.pricing import spent
from levergate.policies.routing import last_user_text
from levergate.policies.shadow import agree, equivalence_messages, equivalence_score, retention

if TYPE_CHECKING:
    from levergate.config.shadow import ShadowSamplingSettings, ShadowSettings
    from levergate.core.clock import Clock
    from levergate.core.reply import Completed
    from levergate.core.service import Service
    from levergate.layers.measure.ledger import OwnSpend
    from levergate.layers.shared import Shared

AGREE, DISAGREE, FAILED, DROPPED = "agree", "disagree", "failed", "dropped"
EXPLORED = "explored_"  # the prefix of an explored sample's result in the shadow counter
# Keys of the client's body the shadow call does without: it is asked whole, for one choice.
_NOT_SHADOWED = ("stream", "stream_options", "n")


@dataclass(frozen=True, slots=True)
class Sample:
    """One cheap answer to shadow: what is needed once the request is gone."""

    label: str  # the layer's metric label (a cascade's, a route's)
    strong: str  # the alias that answers the shadow call
    sampling: ShadowSamplingSettings
    body: Mapping[str, Any]  # the client's body, for the strong alias, whole
    cheap: str  # the cheap answer's text
    request_id: str
    tenant: str
    feature: str
    cheap_alias: str = ""  # the alias whose answer the client got
    # Explored (`ShadowQueue.explore`): the client got the strong alias's answer, held in
    # `cheap`'s place, and the cheap alias is the one asked off the path.
    explored: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """How one sample compared: the result, and what it was decided on."""

    result: str  # AGREE, DISAGREE or FAILED
    strong: str | None = None  # the strong answer's text (None: the call failed)
    judge_score: float | None = None
    cheap: str | None = None  # the cheap answer's text (None: the call failed)


class ShadowQueue:
    """One layer's queue of samples and its workers; `JOB_NAME` names their background job."""

    JOB_NAME: ClassVar[str]
    LAYER: ClassVar[str]  # the `ShadowLabel.layer` of its samples

    @classmethod
    def build(cls, settings: ShadowSettings, *, shared: Shared, metrics: ShadowMeter) -> Self:
        """The queue, with its workers registered as a background job of the pipeline."""
        shadows = cls(settings, metrics=metrics, clock=shared.clock, rng=shared.rng(),
                      spend=shared.own_spend, labels=shared.shadow_labels)  # fmt: skip
        shared.jobs.append(BackgroundJob(cls.JOB_NAME, shadows.run))
        return shadows

    def __init__(
        self,
        settings: ShadowSettings,
        *,
        metrics: ShadowMeter,
        clock: Clock,
        rng: random.Random,
        spend: OwnSpend,
        labels: ShadowLabels | None = None,
    ) -> None:
        self._queue: asyncio.Queue[Sample] = asyncio.Queue(maxsize=settings.queue)
        self._concurrency = settings.concurrency
        self._timeout = settings.timeout_seconds
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        self._spend = spend
        self._labels = labels  # where each compared sample goes (the request log listens)
        self._inner: Service | None = None

    def bind(self, inner: Service) -> None:
        """The service the layer's calls go through (known once the layer wraps it)."""
        self._inner = inner

    def drawn(self, sampling: ShadowSamplingSettings) -> bool:
        """Whether this answer is sampled: one draw, none at all when the rate is 0."""
        return sampling.rate > 0 and self._rng.random() < sampling.rate

    def put(
        self,
        call: Call,
        *,
        label: str,
        strong: str,
        sampling: ShadowSamplingSettings,
        cheap: str,
        cheap_alias: str,
    ) -> None:
        """Queue a sample of `cheap`, `cheap_alias`'s answer to `call`, for `strong`. Never
        waits."""
        body = {k: v for k, v in call.body.items() if k not in _NOT_SHADOWED}
        body["model"] = strong
        ctx = call.ctx
        sample = Sample(label, strong, sampling, body, cheap, ctx.request_id, ctx.principal.tenant,
                        ctx.controls.feature, cheap_alias)  # fmt: skip
        self._queued(sample)

    def explore(
        self,
        call: Call,
        *,
        label: str,
        cheap_alias: str,
        strong: str,
        sampling: ShadowSamplingSettings,
        answer: str,
    ) -> None:
        """Queue `answer`, the strong alias's answer to `call`, to be compared with what
        `cheap_alias` answers off the path: a label where the lever chose the strong alias,
        which no ordinary sample gives (layers/route_shadow.py). Never waits."""
        body = {k: v for k, v in call.body.items() if k not in _NOT_SHADOWED}
        body["model"] = cheap_alias
        ctx = call.ctx
        sample = Sample(label, strong, sampling, body, answer, ctx.request_id,
                        ctx.principal.tenant, ctx.controls.feature, cheap_alias,
                        explored=True)  # fmt: skip
        self._queued(sample)

    def _queued(self, sample: Sample) -> None:
        try:
            self._queue.put_nowait(sample)
        except asyncio.QueueFull:
            self._metrics.shadowed(sample.label, DROPPED)

    async def run(self) -> None:
        """The workers, until cancelled (the Job)."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._concurrency):
                group.create_task(self._work())

    async def _work(self) -> None:
        while True:
            await self._one(await self._queue.get())

    async def _one(self, sample: Sample) -> None:
        """Compare one sample; count it, and hand its label to the listeners."""
        verdict = await self.verdict(sample)
        # Explored samples count apart: the retention gauge is of answers the client got from
        # the cheap alias, which these are not.
        result = EXPLORED + verdict.result if sample.explored else verdict.result
        self._metrics.shadowed(sample.label, result)
        if self._labels is not None and self._labels.heard:
            self._labels.emit(self.labelled(sample, verdict))

    async def compare(self, sample: Sample) -> str:
        """AGREE or DISAGREE; FAILED when a call failed or the judge gave no verdict."""
        return (await self.verdict(sample)).result

    async def verdict(self, sample: Sample) -> Verdict:
        """The comparison, with the strong answer and the judge's score it was decided on."""
        deadline = self._clock.now() + self._timeout
        held = sample.cheap  # the answer the client got (the strong one's, when explored)
        try:
            asked = answer_text((await self._call(sample, sample.body, deadline)).data)
        except LevergateError:
            asked = None
        cheap, strong = (asked, held) if sample.explored else (held, asked)
        return await self.compared(sample, cheap, strong, deadline)

    async def compared(
        self, sample: Sample, cheap: str | None, strong: str | None, deadline: float
    ) -> Verdict:
        """The two answers compared as `sample.sampling` says (None: that answer failed)."""
        if cheap is None or strong is None:
            return Verdict(FAILED, strong, None, cheap)
        score: float | None = None
        try:
            if sample.sampling.compare == "judge":
                score = await self._judged(sample, cheap, strong, deadline)
                same = None if score is None else score >= sample.sampling.judge_threshold
            else:
                same = agree(cheap, strong)
        except LevergateError:
            return Verdict(FAILED, strong, None, cheap)
        if same is None:
            return Verdict(FAILED, strong, None, cheap)
        return Verdict(AGREE if same else DISAGREE, strong, score, cheap)

    def labelled(self, sample: Sample, verdict: Verdict) -> ShadowLabel:
        """The sample and its verdict as the value listeners get."""
        return ShadowLabel(
            request_id=sample.request_id, layer=self.LAYER, name=sample.label,
            cheap=sample.cheap_alias, strong=sample.strong, result=verdict.result,
            compare=sample.sampling.compare, judge_score=verdict.judge_score,
            prompt=last_user_text(sample.body), cheap_text=verdict.cheap or "",
            strong_text=verdict.strong, tenant=sample.tenant, feature=sample.feature,
        )  # fmt: skip

    async def _judged(
        self, sample: Sample, cheap: str, strong: str, deadline: float
    ) -> float | None:
        """The judge's probability that the answers are equivalent (None: no verdict)."""
        s = sample.sampling
        if s.judge is None:  # pragma: no cover - ShadowSampling refuses compare=judge without
            return None
        messages = equivalence_messages(sample.body.get("messages") or [], cheap, strong,
                                        max_chars=s.judge_max_chars)  # fmt: skip
        body = {"model": s.judge, "messages": messages, "max_tokens": s.judge_max_tokens,
                "temperature": 0}  # fmt: skip
        return equivalence_score(answer_text((await self._call(sample, body, deadline)).data))

    async def _call(self, sample: Sample, body: Mapping[str, Any], deadline: float) -> Completed:
        """One shadow call under a context of its own, its usage charged as kind=shadow."""
        if self._inner is None:
            raise RuntimeError("the shadow queue was never bound to a service")
        ctx = Context(
            request_id=f"shadow-{sample.request_id}", principal=Principal(tenant=sample.tenant),
            controls=Controls(priority=Priority.BATCH, deadline=deadline, feature=sample.feature),
        )  # fmt: skip
        reply = await whole(await self._inner(Call(kind="chat", body=body, ctx=ctx)))
        spend = spent(str(body["model"]), "shadow", reply.usage)
        self._spend.charge(spend, tenant=sample.tenant, feature=sample.feature)
        return reply


class ShadowMeter:
    """One layer's shadow series: `levergate_<layer>_shadow_total{<layer>, result}` and
    `levergate_<layer>_quality_retention{<layer>}`, the latter from every answered request and
    every compared sample since start (policies.shadow.retention), absent for a label until its
    first sample is compared (agree or disagree): no number is better than a made-up one. Labels
    are the layer's own bounded names (cascade names, route names)."""

    def __init__(
        self, registry: CollectorRegistry, *, layer: str, shadow_help: str, retention_help: str
    ) -> None:
        self.shadow = Counter(f"levergate_{layer}_shadow", shadow_help, (layer, "result"),
                              registry=registry)  # fmt: skip
        self.retention = Gauge(f"levergate_{layer}_quality_retention", retention_help, (layer,),
                               registry=registry)  # fmt: skip
        self._tallies: dict[str, _Tally] = {}

    def answered(self, label: str, *, cheap: bool) -> None:
        """A request the layer answered; `cheap`: by a cheaper alias than the strong one."""
        tally = self._tally(label)
        tally.answered += 1
        tally.cheap += cheap
        self._measured(label, tally)

    def shadowed(self, label: str, result: str) -> None:
        """A shadow sample's result (AGREE, DISAGREE, FAILED, DROPPED, or a layer's own)."""
        self.shadow.labels(label, result).inc()
        tally = self._tally(label)
        tally.agree += result == AGREE
        tally.disagree += result == DISAGREE
        self._measured(label, tally)

    def _tally(self, label: str) -> _Tally:
        tally = self._tallies.get(label)
        if tally is None:  # bounded like the label
            tally = self._tallies[label] = _Tally()
        return tally

    def _measured(self, label: str, tally: _Tally) -> None:
        kept = retention(accepted=tally.cheap, answered=tally.answered,
                         agree=tally.agree, disagree=tally.disagree)  # fmt: skip
        if kept is not None:
            self.retention.labels(label).set(kept)


@dataclass(slots=True)
class _Tally:
    """One label's counts since start, for its retention gauge."""

    answered: int = 0
    cheap: int = 0
    agree: int = 0
    disagree: int = 0
