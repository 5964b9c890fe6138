"""`TierBook`: what the gateway has seen of each model's service tiers — latencies and refusals —
and the options (price, latency, wait, refusal share) a request has among them.

One per pipeline (`Shared.tiers`), shared by every alias's Tiers layer and by the async requests
that may defer to the provider's batch API (batch/async_requests.py, through `Host.tiers`).
Each answer adds its latency at the tier it was sent at (`observe`, as a ratio to the prior's
median for its size: policies/tiers.py), each refusal marks the tier cooling down for every
request of the model (`refused`; capacity runs out for everyone at once) and raises its refusal
share, each answer lowers it. Models are keyed by the alias that answered (behind `*`, the name
the client sent, which is client-influenced: at most `MAX_MODELS` are tracked, later ones use
the priors). A tier the catalog prices for no model a route names is skipped by the policy,
and said once in the log (`skip_unpriced`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from levergate.catalog import Catalog
from levergate.config import TiersSettings
from levergate.core.clock import Clock
from levergate.policies.estimate import output_cap, prompt_tokens
from levergate.policies.pricing import PER, Rates
from levergate.policies.tiers import LatencyPrior, Option, Samples, Tier, estimate

log = logging.getLogger("levergate.tiers")

MAX_MODELS = 1000
# The tiers a synchronous request may be sent at; batch goes through deferral.
LIVE = (Tier.FLEX, Tier.STANDARD, Tier.PRIORITY)


class TierBook:
    def __init__(self, settings: TiersSettings, *, catalog: Catalog, clock: Clock) -> None:
        self.settings = settings
        self._catalog = catalog
        self._clock = clock
        p = settings.priors
        self._priors = {
            tier: LatencyPrior(prior.seconds, prior.per_1k_prompt, prior.per_1k_output,
                               prior.spread)
            for tier, prior in ((Tier.STANDARD, p.standard), (Tier.FLEX, p.flex),
                                (Tier.PRIORITY, p.priority), (Tier.BATCH, p.batch))
        }  # fmt: skip
        self._samples: dict[tuple[str, Tier], Samples] = {}
        self._refusals: dict[tuple[str, Tier], float] = {}
        self._cool_until: dict[tuple[str, Tier], float] = {}
        self._said: set[str] = set()  # aliases whose unpriced tiers the log named

    def prior(self, tier: Tier) -> LatencyPrior:
        return self._priors[tier]

    # ---- what was seen --------------------------------------------------------------------

    def observe(self, model: str, tier: Tier, *, seconds: float, prompt: int,
                output: int) -> None:  # fmt: skip
        """An answer of `model` at `tier` took `seconds` (its prompt and output tokens)."""
        key = (model, tier)
        samples = self._samples.get(key)
        if samples is None:
            if len(self._samples) >= MAX_MODELS * len(self._priors):
                return
            samples = self._samples[key] = Samples(self.settings.samples)
        median = self._priors[tier].median(prompt, output)
        samples.add(seconds / median if median > 0 else 0.0)
        self._share(key, refused=False)

    def refused(self, model: str, tier: Tier, *, retry_after: float | None) -> None:
        """The provider refused `model` at `tier` (no capacity): it cools down for everyone."""
        key = (model, tier)
        wait = max(self.settings.refusal_cooldown_seconds, retry_after or 0.0)
        if key in self._cool_until or len(self._cool_until) < MAX_MODELS * len(self._priors):
            self._cool_until[key] = self._clock.now() + wait
        self._share(key, refused=True)

    def _share(self, key: tuple[str, Tier], *, refused: bool) -> None:
        """An average over about `refusal_window` attempts (exponentially weighted)."""
        before = self._refusals.get(key)
        if before is None and not refused:
            return  # never refused: nothing to remember
        if before is None and len(self._refusals) >= MAX_MODELS * len(self._priors):
            return
        weight = 1.0 / self.settings.refusal_window
        after = (before or 0.0) * (1.0 - weight) + (weight if refused else 0.0)
        if refused and before is None:
            after = max(after, weight)
        self._refusals[key] = after

    def samples(self, model: str, tier: Tier) -> int:
        found = self._samples.get((model, tier))
        return 0 if found is None else len(found)

    # ---- what a request may do ------------------------------------------------------------

    def seconds(self, model: str, tier: Tier, *, prompt: int = 0, output: int = 0) -> float:
        """`model`'s latency at `tier` for a request of this size, at the configured
        confidence."""
        s = self.settings
        borrowed = None
        if tier is Tier.PRIORITY:
            standard = self._samples.get((model, Tier.STANDARD))
            if standard is not None and len(standard) >= s.min_samples:
                borrowed = standard.quantile(s.confidence)
        return estimate(self._priors[tier], self._samples.get((model, tier)), prompt=prompt,
                        output=output, confidence=s.confidence, min_samples=s.min_samples,
                        borrowed=borrowed)  # fmt: skip

    def option(self, model: str, tier: Tier, rates: Rates, *, body: Mapping[str, Any]) -> Option:
        prompt, output = prompt_tokens(body), output_cap(body)
        dollars = (prompt * rates.input + output * rates.output) / PER
        key = (model, tier)
        wait = max(0.0, self._cool_until.get(key, 0.0) - self._clock.now())
        return Option(tier, dollars, self.seconds(model, tier, prompt=prompt, output=output),
                      wait, self._refusals.get(key, 0.0))  # fmt: skip

    def options(
        self, alias: str, *, model: str, body: Mapping[str, Any], tiers: Iterable[Tier] = LIVE
    ) -> list[Option]:
        """The priced tiers of `alias` (`model`: the name it is sent under, for `*`) as
        options for this request; standard always (unpriced: at no cost)."""
        found = []
        for tier in tiers:
            rates = self._catalog.tier_rates(alias, tier, model)
            if rates is None and tier is Tier.STANDARD:
                rates = Rates()
            if rates is not None:
                found.append(self.option(model or alias, tier, rates, body=body))
        return found

    def priced_tiers(self, alias: str, model: str) -> frozenset[Tier] | None:
        """The tiers `model` (behind `alias`) has a price for; None when it is unpriced."""
        spec = self._catalog.spec(model or alias)
        if not spec.priced:
            return None
        return frozenset((Tier.STANDARD, *spec.tiers))

    def skip_unpriced(self, alias: str, model: str = "") -> None:
        """Say once, at start-up, which tiers the policy will not use for `alias`."""
        spec = self._catalog.spec(model or alias)
        if not spec.priced:
            return
        missing = [t.value for t in (Tier.FLEX, Tier.PRIORITY) if t not in spec.tiers]
        if missing and alias not in self._said:
            self._said.add(alias)
            log.info("tiers: %s has no price for %s; the policy skips them", alias,
                     " and ".join(missing))  # fmt: skip
