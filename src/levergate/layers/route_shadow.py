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

Legacy completions (`/v1/completions`) draw nothing: the shadow is asked as a chat call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from levergate.core.reply import Stream
from levergate.layers.shadow import ShadowMeter, ShadowQueue
from levergate.policies.confidence import answer_text

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from levergate.config.shadow import ShadowSamplingSettings
    from levergate.core.call import Call, RouteDecision
    from levergate.core.reply import Reply

STREAMED = "streamed"  # a sampled answer that was streamed: skipped, counted


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
