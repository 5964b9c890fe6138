"""Service tiers chosen by the deadline (layers/tiers/, policies/tiers.py): flex, standard,
priority, and the provider's batch API through deferral (config/deferral.py).

Off by default: then a request is sent at the tier it asks for (`service_tier`, validated and
priced either way) and nothing is chosen for it. On, a request that names no tier is sent at
the cheapest tier the catalog prices for its model whose observed latency meets its deadline
with `confidence`; a flex refusal (429 "resource unavailable", Groq's 498) is re-decided within
the deadline and the route's `ceiling`.

    tiers:
      enabled: true
      confidence: 0.95
      routes:
        gpt-5-mini: {ceiling: priority, deadline_seconds: 60}

The deadline a request is planned for: its own (`x-levergate-timeout`; for an async request
`x-levergate-deadline`), else with `client_timeout` the client's own timeout (the SDKs send it
as `x-stainless-read-timeout`), else its route's `deadline_seconds`, else its priority class's
(`class_deadlines`; batch lines and async requests run at `batch`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict

CeilingName = Literal["flex", "standard", "priority"]


class TierPriorSettings(_Strict):
    """A tier's latency before any is observed: log-normal, median `seconds` plus
    `per_1k_prompt` for each thousand prompt tokens and `per_1k_output` for each thousand
    output tokens (the output cap when planning), sigma `spread`. Observed answers of the
    model at that tier replace the spread once there are `min_samples` of them."""

    seconds: float = Field(gt=0)
    per_1k_prompt: float = Field(0.0, ge=0)
    per_1k_output: float = Field(0.0, ge=0)
    spread: float = Field(0.5, ge=0, le=3)


class TierPriorsSettings(_Strict):
    # Hosted chat models answer the first token within about a second and decode roughly
    # 50-100 tokens a second: 20 s per thousand output tokens is the slow end on purpose
    # (deadlines are missed by estimating fast).
    standard: TierPriorSettings = TierPriorSettings(seconds=1.0, per_1k_prompt=0.5,
                                                    per_1k_output=20.0)  # fmt: skip
    # OpenAI: priority "generates tokens faster and at a more consistent speed" (its latency
    # SLA: 99% above 50-100 tokens per second, https://openai.com/api-priority-processing/).
    priority: TierPriorSettings = TierPriorSettings(seconds=0.8, per_1k_prompt=0.4,
                                                    per_1k_output=12.0, spread=0.3)  # fmt: skip
    # OpenAI: "slower response times"; its guide raises the client timeout to 15 minutes
    # (https://developers.openai.com/api/docs/guides/flex-processing). A wide prior: flex is
    # chosen for deadlines of minutes until its own latencies are observed.
    flex: TierPriorSettings = TierPriorSettings(seconds=30.0, per_1k_prompt=1.0,
                                                per_1k_output=40.0, spread=1.0)  # fmt: skip
    # Batch APIs promise 24 hours and usually answer within a few: at 95% this prior says
    # about 10 h, so only deadlines of half a day or more defer before turnarounds are seen.
    batch: TierPriorSettings = TierPriorSettings(seconds=7200.0, spread=1.0)


class TierRouteSettings(_Strict):
    """One alias's tier policy."""

    # The dearest tier the policy may choose or escalate to: `standard` never pays the
    # priority premium; `priority` lets an interactive request that would miss its deadline
    # at standard pay it; `flex` keeps the alias at the discount (a request that cannot wait
    # for flex is still sent at flex and may miss its deadline).
    ceiling: CeilingName = "standard"
    # The deadline planned for a request of this alias that brings none (None: the class's).
    deadline_seconds: float | None = Field(None, gt=0)
    # False: the policy leaves this alias alone (requests go at the tier they ask for).
    choose: bool = True


class ClassDeadlinesSettings(_Strict):
    """Seconds planned for a request of each priority class that brings no deadline (None: no
    deadline, so standard). Batch lines run within their batch's 24-hour window."""

    interactive: float | None = Field(None, gt=0)
    default: float | None = Field(None, gt=0)
    batch: float | None = Field(24 * 3600.0, gt=0)


class TiersSettings(_Strict):
    enabled: bool = False
    # The probability a chosen tier's answer arrives by the deadline, by its estimate.
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    routes: dict[str, TierRouteSettings] = Field(default_factory=dict)
    # The policy of an alias `routes` does not list.
    default_route: TierRouteSettings = Field(default_factory=TierRouteSettings)
    class_deadlines: ClassDeadlinesSettings = Field(default_factory=ClassDeadlinesSettings)
    priors: TierPriorsSettings = Field(default_factory=TierPriorsSettings)
    # Observed latencies kept per model and tier (the newest), and how many make an estimate.
    samples: int = Field(256, ge=8, le=100_000)
    min_samples: int = Field(20, ge=1, le=100_000)
    # After a refusal, the tier is not tried again for this long (or the provider's
    # Retry-After), by any request of the model: capacity runs out for everyone at once.
    refusal_cooldown_seconds: float = Field(15.0, ge=0, le=3600)
    # The refusal share is an average over about this many recent attempts of the tier.
    refusal_window: int = Field(50, ge=1, le=100_000)
    # Times one request is decided again after refusals before its last refusal goes back.
    max_redecisions: int = Field(4, ge=1, le=32)
    # Plan a request that sends no `x-levergate-timeout` for the client's own timeout (the
    # OpenAI and Anthropic SDKs send it as `x-stainless-read-timeout`). Off by default: the
    # SDKs send their default of 600 s on every request, which says nothing about how long its
    # caller would wait, and planned for, every such request would go flex.
    client_timeout: bool = False

    def route(self, alias: str) -> TierRouteSettings:
        return self.routes.get(alias, self.default_route)
