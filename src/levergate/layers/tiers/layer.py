"""Tiers: the service tier a request is sent at — the client's own `service_tier`, or the
cheapest the deadline allows (policies/tiers.py) — and a flex refusal re-decided in time.

PER MODEL, under Retry and above Deadline and Balance: the alias is known here (its catalog
prices, its route's ceiling), every attempt Retry makes is decided afresh on the time then left,
and each attempt is still bounded by Deadline below. Above the caches nothing changes: a cache
keys the body as the client sent it (its own `service_tier` included), never the tier chosen.

- Explicit: a request that sets `service_tier` gets exactly that, validated (the edge checked
  the name: protocol/openai/body.py): a tier the alias's catalog entry has no price for is a
  400 naming the tier and the model (an unpriced alias, self-hosted, is not checked: nothing is
  billed there). No re-decision: a flex refusal goes back as the provider's 429 (Retry above
  may try flex again, as for any 429).
- Chosen: with `tiers.enabled` and the route's `choose`, a request that names no tier gets the
  policy's choice for the deadline it is planned for (config/tiers.py), sent as the upstream's
  `service_tier` (nothing is sent for standard, the default). A refusal of the chosen tier (429
  "resource unavailable", Groq's 498 `capacity_exceeded`) cools the tier down for the model
  and is decided again on what is left of the deadline: flex again after the cool-down when
  there is time for it (cheaper), else the next tier up; after `max_redecisions` refusals the
  refused tiers are left out. A refusal with no time left goes back to the client.
- Hedged: an attempt at a slower tier (flex; standard when priority is allowed) that has not
  answered (a stream: its first event) by the latest time the fastest tier above it can still
  meet the deadline (its estimate at the confidence) gets that tier asked beside it; the first
  answer wins and the other is cancelled (hedge.py). The moment is after the attempt's own
  estimate unless the deadline is tight for both, so at the confidence it is rare. A slow
  draw costs the discount on that request, not its deadline. A provider may bill the tokens
  of the cancelled attempt; the ledger cannot know them.

Every attempt's latency at its tier goes into the `TierBook` (a stream's when it closes), so
the estimates follow what the provider does. The trace carries the tier asked (`trace.tier`)
and how it was decided (`trace.tier_decision`); the record prices the answer at the tier the
answer's own `service_tier` names (layers/measure/recorder.py).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from levergate.config import ModelSettings, TiersSettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.controls import Priority
from levergate.core.reply import Completed, Ended, Reply, Watcher
from levergate.core.service import Answer, Layer, Service
from levergate.errors import BadRequest, UpstreamError, UpstreamRejected
from levergate.layers.tiers.book import TierBook
from levergate.layers.tiers.hedge import Won, hedged
from levergate.policies.estimate import output_cap, prompt_tokens
from levergate.policies.pricing import from_usage
from levergate.policies.tiers import (
    EXPLICIT,
    Ask,
    Choice,
    Tier,
    TierDecision,
    allowed,
    asked_tier,
    choose,
    wire_tier,
)

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

# Codes and messages of a provider refusing a tier for want of capacity (not a rate limit).
REFUSAL_CODES = frozenset({"resource_unavailable", "capacity_exceeded", "resource_exhausted"})
_REFUSAL_TEXT = (
    "resource unavailable",
    "resources unavailable",
    "capacity exceeded",
    "no capacity",
)


@dataclass(frozen=True, slots=True)
class _Plan:
    choice: Choice
    pause: float  # seconds to wait before sending
    cut: float | None  # seconds after sending to ask `rescue` beside it (None: never)
    rescue: Tier | None


def is_refusal(exc: BaseException) -> bool:
    """A tier refused for capacity: Groq's 498, or a 429 that says so (OpenAI's flex 429
    "resource unavailable"); a 429 for the key's own rate limit is not one."""
    if not isinstance(exc, UpstreamRejected):
        return False
    if exc.upstream_status == 498:
        return True
    if exc.upstream_status != 429:
        return False
    if exc.code in REFUSAL_CODES:
        return True
    text = exc.message.lower()
    return exc.code != "rate_limit_exceeded" and any(t in text for t in _REFUSAL_TEXT)


class Tiers:
    @classmethod
    def layer(
        cls, settings: TiersSettings, *, model: ModelSettings, shared: Shared
    ) -> Layer | None:
        """None for an unpriced alias with the policy off: nothing to choose, nothing to check
        a price against (`*` is always built: the names behind it have prices of their own)."""
        route = settings.route(model.name)
        choosing = settings.enabled and route.choose
        spec = shared.catalog.spec(model.name)
        if not choosing and not spec.priced and model.name != "*":
            return None
        if choosing:
            shared.tiers.skip_unpriced(model.name)
        return partial(cls, settings=settings, alias=model.name, book=shared.tiers,
                       clock=shared.clock, choosing=choosing, rng=shared.rng())  # fmt: skip

    def __init__(
        self, inner: Service, *, settings: TiersSettings, alias: str, book: TierBook,
        clock: Clock, choosing: bool, rng: random.Random | None = None,
    ) -> None:  # fmt: skip
        self._inner = inner
        self._rng = rng or random.Random(0)  # noqa: S311 - spreading waits, not a secret
        self._s = settings
        self._alias = alias
        self._book = book
        self._clock = clock
        self._choosing = choosing
        self._ceiling = Tier(settings.route(alias).ceiling)
        self._route_deadline = settings.route(alias).deadline_seconds
        d = settings.class_deadlines
        self._class_deadline = {Priority.INTERACTIVE: d.interactive, Priority.DEFAULT: d.default,
                                Priority.BATCH: d.batch}  # fmt: skip

    def __call__(self, call: Call) -> Answer:
        asked = call.body.get("service_tier")
        if asked is not None:
            return self._explicit(call, asked)
        if not self._choosing:
            return self._inner(call)
        return self._chosen(call)

    async def _explicit(self, call: Call, asked: Any) -> Reply:
        tier = asked_tier(asked) if isinstance(asked, str) else None
        model = self._model(call)
        if tier is not None:
            priced = self._book.priced_tiers(self._alias, model)
            if priced is not None and tier not in priced:
                raise BadRequest(
                    f"service_tier '{asked}' is not available for model '{model}': its catalog "
                    f"entry has no {tier.value} price (add one under catalog.<model>.price."
                    f"{tier.value}, or send 'default').",
                    code="unsupported_service_tier",
                    param="service_tier",
                )
        trace = call.ctx.trace
        trace.tier = tier
        trace.tier_decision = TierDecision(tier, EXPLICIT, asked=str(asked))
        return await self._timed(call, tier)

    async def _chosen(self, call: Call) -> Reply:
        deadline = self._deadline(call)
        model = self._model(call)
        refused: list[Tier] = []
        last: UpstreamError | None = None
        for _ in range(self._s.max_redecisions + 1):
            remaining = None if deadline is None else deadline - self._clock.now()
            if last is not None and remaining is not None and remaining <= 0:
                break
            # The last decision leaves out the tiers that refused: the next one up answers.
            spent = frozenset(refused) if len(refused) >= self._s.max_redecisions else None
            plan = self._decide(call, model, remaining, spent or frozenset())
            trace = call.ctx.trace
            trace.tier = plan.choice.tier
            trace.tier_decision = TierDecision(
                plan.choice.tier, plan.choice.reason, seconds=remaining, refused=tuple(refused)
            )
            if plan.pause > 0:
                await self._clock.sleep(plan.pause)
            try:
                return await self._attempt(call, plan)
            except UpstreamRejected as exc:
                if plan.choice.tier is Tier.STANDARD or not is_refusal(exc):
                    raise
                self._book.refused(model, plan.choice.tier, retry_after=exc.retry_after)
                refused.append(plan.choice.tier)
                trace.note(layer="tiers", text=f"{plan.choice.tier} refused; deciding again")
                last = exc
        if last is None:  # pragma: no cover - the loop only ends early after a refusal
            raise RuntimeError("no decision was made")
        last.retried = True
        raise last

    async def _attempt(self, call: Call, plan: _Plan) -> Reply:
        """The chosen tier's attempt, hedged by the faster one when it overruns (hedge.py)."""
        chosen = plan.choice.tier
        first = partial(self._timed, self._sent(call, chosen), chosen)
        if plan.cut is None or plan.rescue is None:
            return await first()
        rescue = plan.rescue

        async def second() -> Reply:
            call.ctx.trace.tier = rescue  # what the limits below see: no longer background
            return await self._timed(self._sent(call, rescue), rescue)

        reply, won = await hedged(first, second, after=plan.cut, clock=self._clock)
        if won is Won.ALONE:
            return reply
        trace = call.ctx.trace
        if trace.tier_decision is not None:
            trace.tier_decision = dataclasses.replace(trace.tier_decision, hedged=rescue)
        trace.tier = rescue if won is Won.SECOND else chosen
        trace.note(layer="tiers", text=f"{chosen} overran its estimate; {rescue} asked too, "
                   f"{trace.tier} answered")  # fmt: skip
        return reply

    def _decide(
        self, call: Call, model: str, remaining: float | None, leave_out: frozenset[Tier]
    ) -> _Plan:
        """The choice; the wait before sending it (a cooling tier's rest of the cool-down,
        spread by up to as much again within the slack, so the requests it held do not all
        come back at once); and when to ask the fastest tier above it too, if one is in time."""
        # A tier left out stays an option that never answers in time (standard must stay).
        options = [
            o if o.tier not in leave_out else dataclasses.replace(o, seconds=math.inf)
            for o in self._book.options(self._alias, model=model, body=call.body)
        ]
        ask = Ask(remaining, call.ctx.controls.priority is Priority.INTERACTIVE, self._ceiling)
        choice = choose(options, ask)
        chosen = next(o for o in options if o.tier is choice.tier)
        pause = 0.0
        if choice.fits and chosen.wait > 0:
            slack = math.inf if remaining is None else max(0.0, remaining - chosen.done_by)
            pause = chosen.wait + self._rng.random() * min(chosen.wait, slack)
        faster = [o for o in allowed(options, ask)
                  if o.tier.rank > chosen.tier.rank and o.refusals <= 0]  # fmt: skip
        if not (choice.fits and remaining is not None and faster):
            return _Plan(choice, pause, None, None)
        # As late as the faster tier allows (`hedge.py`: the faster tier is asked beside the
        # chosen one, which keeps running: the first answer wins).
        rescue = min(faster, key=lambda o: o.seconds)
        cut = remaining - rescue.seconds - pause
        return _Plan(choice, pause, cut if cut > 0 else None, rescue.tier)

    def _sent(self, call: Call, tier: Tier) -> Call:
        if tier is Tier.STANDARD:
            return call  # the provider's default: nothing to send
        return call.with_body(service_tier=wire_tier(tier))

    def _deadline(self, call: Call) -> float | None:
        """The deadline the request is planned for (config/tiers.py)."""
        controls = call.ctx.controls
        if controls.deadline is not None:
            return controls.deadline
        if self._s.client_timeout and controls.patience is not None:
            return controls.patience
        seconds = self._route_deadline or self._class_deadline[controls.priority]
        return None if seconds is None else self._clock.now() + seconds

    def _model(self, call: Call) -> str:
        """The name the request is priced under: the alias, or behind `*` the client's name."""
        return call.model if self._alias == "*" else self._alias

    async def _timed(self, call: Call, tier: Tier | None) -> Reply:
        """The attempt, its latency at `tier` into the book once its answer is whole (sized by
        its usage: prompt and output tokens as the provider counted them)."""
        started = self._clock.now()
        reply = await self._inner(call)
        if tier is None:
            return reply
        if isinstance(reply, Completed):
            self.observe(call, tier, started, reply.usage)
            return reply
        return reply.watch(_Timed(self, call, tier, started))

    def observe(
        self, call: Call, tier: Tier, started: float, usage: Mapping[str, Any] | None
    ) -> None:
        prompt, output = _size(call.body, usage)
        self._book.observe(self._model(call), tier, seconds=self._clock.now() - started,
                           prompt=prompt, output=output)  # fmt: skip


class _Timed(Watcher):
    """A streamed attempt's latency at its tier, into the book once it ended whole."""

    __slots__ = ("_call", "_started", "_tier", "_tiers")

    def __init__(self, tiers: Tiers, call: Call, tier: Tier, started: float) -> None:
        self._tiers, self._call, self._tier, self._started = tiers, call, tier, started

    async def end(self, ended: Ended) -> None:
        if ended.error is None:
            self._tiers.observe(self._call, self._tier, self._started, ended.usage)


def _size(body: Mapping[str, Any], usage: Mapping[str, Any] | None) -> tuple[int, int]:
    """(prompt, output) tokens: the provider's count, else the estimate and the cap."""
    tokens = from_usage(usage)
    if tokens.input or tokens.output:
        return tokens.input, tokens.output
    return prompt_tokens(body), output_cap(body)
