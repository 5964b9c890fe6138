"""The semantic cache's verifications: sampled lookups, checked off the request path, as labels
for the threshold gate (policies/cache_threshold.py, `levergate cache threshold`).

Why a band below the threshold. A hit is checked at the threshold served; a lower threshold
would serve hits the cache never served, so their quality can only be measured by looking at
them: a sampled miss whose neighbours reach `calibration.band` below the threshold is served
normally (the client gets the model's answer, as without sampling), and off the path the first
of those neighbours the guards let through — the hit a lower threshold would have served — is
compared with the answer the request got. A sampled hit is compared with what the model asked
answers to the same request, asked off the path. Both comparisons are the shadow samples' own
(layers/shadow.py: `normalized`, or a judge call with `compare: judge`).

Every sampled lookup is one label (requestlog/labels.py, layer `semantic`): the model or route
asked, the similarity of its would-be hit (None when nothing in the band survived), the verdict
(`agree`, `disagree`: a false hit, `failed`, or `none`) and, as JSON, the threshold then and the
band's floor. Sampling is one draw per lookup from the queue's seeded random source at
`calibration.rate`, then a token of the `per_minute` bucket, before the lookup, so what is
sampled does not depend on what the lookup finds; a full queue drops the check (counted
`result="dropped"` in `levergate_semantic_cache_checks_total{route, result}`), the request never
waits, and the queue holds at most `calibration.queue` checks (each a request body already
bounded at the edge and two answers' text).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from prometheus_client import CollectorRegistry, Counter

from levergate.core.call import Call
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.layers.shadow import FAILED, Sample, ShadowMeter, ShadowQueue, Verdict
from levergate.policies.routing import last_user_text

if TYPE_CHECKING:
    from levergate.config.cache import SemanticCalibrationSettings
    from levergate.core.clock import Clock

__all__ = ["CHEAP", "NONE", "CacheChecks", "Check", "CheckMeter"]

NONE = "none"  # a sampled lookup with no would-be hit down to the band's floor
CHEAP = "cache"  # the `cheap` of a semantic label: the answer came, or would have, from the cache
# (similarity, the cached answer's text) of a miss's would-be hit, from its band neighbours
Finder = Callable[[str, Sequence[tuple[str, float]]], Awaitable[tuple[float, str] | None]]


@dataclass(frozen=True, slots=True)
class Check(Sample):
    """One sampled lookup: a served hit (`served`: its similarity; `cheap`: the cached answer,
    `body`: the request for the model asked) or a miss (`real`: the answer the request got,
    `band`: its neighbours in the band, best first)."""

    question: str = ""
    served: float | None = None
    real: str | None = None
    band: tuple[tuple[str, float], ...] = ()
    threshold: float = 1.0
    floor: float = 1.0


class CheckMeter(ShadowMeter):
    """`levergate_semantic_cache_checks_total{route, result}`: sampled lookups by result."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.shadow = Counter(
            "levergate_semantic_cache_checks",
            "Sampled semantic cache lookups verified off the request path, by the model or "
            "route asked and result (agree, disagree: a false hit, failed, none: no would-be "
            "hit in the band, dropped: the queue was full).",
            ("route", "result"), registry=registry,
        )  # fmt: skip
        self._tallies = {}

    def shadowed(self, label: str, result: str) -> None:
        self.shadow.labels(label, result).inc()


class _Bucket:
    """At most `per_minute` a minute, in bursts of at most a tenth of a minute's."""

    def __init__(self, per_minute: float, clock: Clock) -> None:
        self._rate = per_minute / 60.0
        self._cap = max(1.0, per_minute / 10.0)
        self._tokens = self._cap
        self._clock = clock
        self._at = clock.now()

    def take(self) -> bool:
        now = self._clock.now()
        self._tokens = min(self._cap, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class CacheChecks(ShadowQueue):
    JOB_NAME = "semantic_cache_check"
    LAYER = "semantic"

    def setup(self, settings: SemanticCalibrationSettings) -> None:
        self._settings = settings
        self._bucket = _Bucket(settings.per_minute, self._clock)
        self._finder: Finder | None = None

    def bind_finder(self, finder: Finder) -> None:
        """How the worker finds a miss's would-be hit (the cache's guards, off the path)."""
        self._finder = finder

    def sampled(self) -> bool:
        """Whether this lookup is checked: one draw, then a token (module docstring)."""
        return self.drawn(self._settings) and self._bucket.take()

    def check(
        self,
        call: Call,
        *,
        question: str,
        threshold: float,
        served: float | None = None,
        cached: str = "",
        real: str | None = None,
        band: Sequence[tuple[str, float]] = (),
    ) -> None:
        """Queue a sampled lookup's check; never waits (a full queue drops it, counted)."""
        ctx = call.ctx
        body = {k: v for k, v in call.body.items() if k not in ("stream", "stream_options", "n")}
        floor = max(0.0, threshold - self._settings.band)
        found = Check(call.model, call.model, self._settings, body, cached, ctx.request_id,
                      ctx.principal.tenant, ctx.controls.feature, CHEAP, question=question,
                      served=served, real=real, band=tuple(band), threshold=threshold,
                      floor=floor)  # fmt: skip
        if served is None and not band:  # nothing to compare: the label at once
            self._done(found, Verdict(NONE), None)
            return
        self._queued(found)

    async def _work(self) -> None:
        while True:
            sample = await self._queue.get()
            assert isinstance(sample, Check)  # noqa: S101 - only checks are queued here
            verdict, similarity = await self._checked(sample)
            self._done(sample, verdict, similarity)

    async def _checked(self, check: Check) -> tuple[Verdict, float | None]:
        if check.served is not None:
            return await self.verdict(check), check.served
        if self._finder is None:  # pragma: no cover - bound when the cache is built
            raise RuntimeError("the semantic cache checks were never bound to the cache")
        found = await self._finder(check.question, check.band)
        if found is None:
            return Verdict(NONE), None
        similarity, cached = found
        if check.real is None:
            return Verdict(FAILED, None, None, cached), similarity
        deadline = self._clock.now() + self._timeout
        return await self.compared(check, cached, check.real, deadline), similarity

    def _done(self, check: Check, verdict: Verdict, similarity: float | None) -> None:
        self._metrics.shadowed(check.label, verdict.result)
        if self._labels is None or not self._labels.heard:
            return
        detail = orjson.dumps({"threshold": check.threshold, "floor": check.floor,
                               "served": check.served is not None}).decode()  # fmt: skip
        self._labels.emit(ShadowLabel(
            request_id=check.request_id, layer=self.LAYER, name=check.label, cheap=CHEAP,
            strong=check.strong, result=verdict.result, compare=check.sampling.compare,
            judge_score=verdict.judge_score, prompt=check.question or last_user_text(check.body),
            cheap_text=verdict.cheap or "", strong_text=verdict.strong, tenant=check.tenant,
            feature=check.feature, similarity=similarity, detail=detail,
        ))  # fmt: skip
