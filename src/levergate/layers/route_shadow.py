"""The route's shadow samples: an answer a route sent to an alias other than its `default`,
answered again by the default off the request path, and the two compared — what the route keeps
live, `levergate_route_quality_retention{route}`, beside what its router file measured offline
(`levergate_router_quality_retention`, for learned routes only).

`RouteShadows` is the routes' `ShadowQueue` (layers/shadow.py: one bounded queue for all routes,
`routing.shadow.queue`; its workers under the Supervisor as the `route_shadow` job; the shadow
and judge calls, their spend as `levergate_spend_usd{kind="shadow"}`). The route offers each
answer once it has it, and the client gets the very reply it would have got: `offer` reads the
answer and never changes it, nor the request's record. Every routed request answered counts
toward the gauge (policies.shadow.retention): answered by the default it is retained, answered by
another alias it keeps quality at the samples' agreement rate; a request that failed counts for
nothing.

What is offered, in this order (each answer draws at most once from the queue's seeded random
source, so a test replays the draws):

- an answer from the default itself is not: it is the counterfactual, there is nothing to
  compare it with (it counts as retained). What answered is `trace.alias`, so a cheap alias
  whose fallback is the default, and that fell back, answered with the default;
- a chat answer from another alias draws; with probability `shadow.rate` (the route's own
  sampling, else `routing.shadow`'s) it is sampled;
- a sampled answer the client asked to stream is skipped and counted, `result="streamed"`: its
  text passes through unbuffered and is never held whole, and teeing it would hold up to a whole
  answer per stream for a sample that may find the queue full. Retention is then estimated from
  the whole answers' samples, which is unbiased as long as streamed and whole requests are alike;
- a sampled answer with no text (a tool call, a refusal) is not compared (nothing to compare).

Exploration (`learned.explore`, learned routes only): ordinary samples exist only where the
route chose the cheap alias, so labels from them say nothing of the prompts it sends to the
default, and a router learned from them, or a gate measuring on them (routing/promote.py),
could never find that some of those could go cheap. With probability `learned.explore` a whole
chat answer of the default that the learned router chose is compared with what the learned
cheap alias answers off the path (`ShadowQueue.explore`); the result is counted as
`result="explored_agree|explored_disagree|explored_failed"`, apart from the retention gauge
(the client got the default's answer), and logged as a label like any other.

A challenger (`levergate router challenge`: a candidate router beside the route's file, loaded
by the router watch) decides a share of the route's learned decisions too, off the path
(`challenge`, one draw at its share): its score is computed by a shadow worker, and whatever
either router sends cheap is compared with the strong answer — the strong alias asked when the
client got the cheap answer, the cheap alias when it got the strong one, nothing when both chose
strong (`result="strong"`). Each is a label of layer `challenger` carrying both decisions and
the candidate's digest (`routing.promote.live` reads the two retentions from them), counted as
`result="challenger_*"`, apart from the gauge.

Legacy completions (`/v1/completions`) draw nothing: the shadow is asked as a chat call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from levergate.core.reply import Stream
from levergate.layers.shadow import FAILED, Sample, ShadowMeter, ShadowQueue, Verdict
from levergate.policies.confidence import answer_text
from levergate.policies.routing import last_user_text

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from levergate.config.shadow import ShadowSamplingSettings
    from levergate.core.call import Call, RouteDecision
    from levergate.core.reply import Reply
    from levergate.layers.route import Challenger

STREAMED = "streamed"  # a sampled answer that was streamed: skipped, counted
STRONG = "strong"  # a challenged request both routers sent strong: nothing to compare
CHALLENGER = "challenger_"  # the prefix of a challenged request's result in the shadow counter


@dataclass(frozen=True, slots=True)
class Challenge(Sample):
    """A request the challenger router decides too, off the path: `cheap` holds the answer the
    client got, from the champion's choice (`champion_cheap`: its cheap alias)."""

    challenger: Challenger | None = None
    champion_cheap: bool = False
    champion_score: float | None = None


def route_meter(registry: CollectorRegistry) -> ShadowMeter:
    """`levergate_route_shadow_total{route, result}`, `levergate_route_quality_retention{route}`."""
    return ShadowMeter(
        registry,
        layer="route",
        shadow_help="Answers a route sent to an alias other than its default, shadowed by the "
        "default, by result (agree, disagree, failed: a call or the comparison failed, dropped: "
        "the queue was full, streamed: a streamed answer, not sampled).",
        retention_help="Estimated share of its default's quality a route keeps live: 1 - "
        "share answered by another alias x shadow disagreement rate. Absent until a shadow "
        "sample is compared.",
    )


class RouteShadows(ShadowQueue):
    JOB_NAME = "route_shadow"
    LAYER = "route"

    def offer(
        self,
        call: Call,
        decision: RouteDecision,
        sampling: ShadowSamplingSettings,
        reply: Reply,
        *,
        explore: tuple[str, float] | None = None,
    ) -> None:
        """Count `reply`, the answer to the routed `call`, toward the route's retention, and
        maybe shadow it (module docstring); `explore`: a learned route's (cheap alias,
        `learned.explore`). Never waits; `reply` is read, never changed."""
        by_default = (call.ctx.trace.alias or decision.chosen) == decision.default
        self._metrics.answered(decision.asked, cheap=not by_default)
        if by_default and explore is not None and decision.router == "learned":
            self._explored(call, decision, sampling, reply, explore)
            return
        if by_default or call.kind != "chat" or not self.drawn(sampling):
            return
        if isinstance(reply, Stream):
            self._metrics.shadowed(decision.asked, STREAMED)
            return
        text = answer_text(reply.data)
        if text is None:
            return
        self.put(call, label=decision.asked, strong=decision.default, sampling=sampling,
                 cheap=text, cheap_alias=call.ctx.trace.alias or decision.chosen)  # fmt: skip

    def _explored(
        self,
        call: Call,
        decision: RouteDecision,
        sampling: ShadowSamplingSettings,
        reply: Reply,
        explore: tuple[str, float],
    ) -> None:
        """Maybe ask the cheap alias too, off the path, what the default answered: one draw."""
        cheap, rate = explore
        if rate <= 0 or call.kind != "chat" or isinstance(reply, Stream):
            return
        if self._rng.random() >= rate:
            return
        text = answer_text(reply.data)
        if text is not None:
            self.explore(call, label=decision.asked, cheap_alias=cheap,
                         strong=decision.default, sampling=sampling, answer=text)  # fmt: skip

    # ---- the challenger (routing/promote.py reads its labels) ------------------------------------

    def challenge(
        self,
        call: Call,
        decision: RouteDecision,
        challenger: Challenger,
        sampling: ShadowSamplingSettings,
        reply: Reply,
    ) -> None:
        """Maybe have `challenger` decide `call` too, off the path (its share: one draw), and
        compare what it needs compared. Never waits; `reply` is read, never changed."""
        if call.kind != "chat" or isinstance(reply, Stream) or decision.router != "learned":
            return
        if self._rng.random() >= challenger.share:
            return
        text = answer_text(reply.data)
        if text is None:
            return
        answered = call.ctx.trace.alias or decision.chosen
        learned = challenger.learned
        body = {k: v for k, v in call.body.items() if k not in ("stream", "stream_options", "n")}
        ctx = call.ctx
        sample = Challenge(decision.asked, learned.strong, sampling, body, text,
                           ctx.request_id, ctx.principal.tenant, ctx.controls.feature,
                           learned.cheap, challenger=challenger,
                           champion_cheap=answered != decision.default,
                           champion_score=decision.score)  # fmt: skip
        self._queued(sample)

    async def _work(self) -> None:
        while True:
            sample = await self._queue.get()
            if isinstance(sample, Challenge):
                await self._challenged(sample)
                continue
            await self._one(sample)

    async def _challenged(self, sample: Challenge) -> None:
        challenger = sample.challenger
        assert challenger is not None  # noqa: S101 - always set by `challenge`
        try:
            score: float | None = await challenger.learned.score(last_user_text(sample.body))
        except Exception:  # an embedder that fails: the sample fails, the worker carries on
            score = None
        ours_cheap = score is not None and score < challenger.learned.threshold
        if score is None:
            verdict = Verdict(FAILED)
        elif not (ours_cheap or sample.champion_cheap):
            verdict = Verdict(STRONG)
        elif sample.champion_cheap:  # the client got the cheap answer: ask the strong alias
            asked = {**sample.body, "model": sample.strong}
            verdict = await self.verdict(dataclasses.replace(sample, body=asked))
        else:  # the client got the strong answer: ask the cheap alias
            asked = {**sample.body, "model": sample.cheap_alias}
            verdict = await self.verdict(dataclasses.replace(sample, body=asked, explored=True))
        self._metrics.shadowed(sample.label, CHALLENGER + verdict.result)
        if self._labels is None or not self._labels.heard:
            return
        detail = {"candidate": challenger.digest, "challenger": "cheap" if ours_cheap else "strong",
                  "champion": "cheap" if sample.champion_cheap else "strong",
                  "challenger_score": score, "champion_score": sample.champion_score}  # fmt: skip
        label = self.labelled(sample, verdict)
        self._labels.emit(label._replace(layer="challenger", detail=orjson.dumps(detail).decode()))
