"""The cost ledger: what each finished request cost and what each lever saved, from the call's
`Trace` and the catalog, and the `/metrics` series of both.

`Measure` asks `Ledger.bill` once per request, after the answer went out; the arithmetic and the
counterfactual of every lever are in `policies.pricing` (pure), this module only reads the
typed facts the layers left: what answered (`trace.alias`, and `trace.upstream_model` behind
`*`), the cache outcome, the route decision, the trimmed tokens, the side spends, the batch flag.

`LedgerSink` turns the record into dollars counters by lever, model, tenant and feature. Those
labels are client-influenced (tenant names come from keys or headers, features from a header,
models behind `*` from the body), so each keeps at most `ledger.max_label_values` values and the
(model, tenant, feature) combinations at most `ledger.max_label_sets`; beyond, `other`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from levergate.catalog import Catalog
from levergate.config import LedgerSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Spend
from levergate.core.tokenizer import TokenSource
from levergate.layers.measure import hot
from levergate.layers.measure.labels import OTHER, LabelValues
from levergate.layers.measure.record import NO_SAVINGS, RequestRecord
from levergate.policies.pricing import Bill, Lever, Side, Tokens, bill, cost, from_usage
from levergate.policies.tiers import Tier

__all__ = ["Ledger", "LedgerMetrics", "LedgerSink", "OwnSpend"]

NOTHING = Bill(0.0, 0.0, (), NO_SAVINGS)
# Read once here: an enum member read from its class goes through the metaclass's
# `__getattr__` hook on CPython 3.11 (~800 instructions), and a lever made from its value
# through the class's call; both on every cache hit.
_HIT, _MISS = CacheOutcome.HIT, CacheOutcome.MISS
_REPORTED = TokenSource.REPORTED
_FLEX, _PRIORITY = Tier.FLEX, Tier.PRIORITY
_LEVERS = {lever.value: lever for lever in Lever}
# The hits' bills remembered (`Ledger._served`): at most this many entries' results.
HIT_BILLS = 1024


class Ledger:
    """Prices requests at the catalog's rates (`Shared.catalog`)."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        # A hit's bill by its `CacheResult` (its id, the result held beside it so the id is
        # not reused): the exact cache serves one result object per entry
        # (layers/cache/entries.py `served`), and the bill of a hit that names what answered
        # it is a function of that result and the catalog's rates for it, which this ledger's
        # catalog fixes (a reload builds a new one). Once full, it starts over.
        self._hit_bills: dict[int, tuple[CacheResult, Bill]] = {}

    def bill(
        self, call: Call, tokens: Tokens, usage: Mapping[str, Any] | None, *,
        tier: Tier | None = None,
    ) -> Bill:  # fmt: skip
        """The request's cost (answer plus side spends) and savings by lever; `tier` is the
        service tier that served it (flex and priority at their own rates, when priced)."""
        trace = call.ctx.trace
        cache = trace.cache
        if cache is not None and cache.outcome is not _MISS:  # `cache.free`, without its call
            return self._served(call, cache, usage)
        side = tuple(self.price(s) for s in trace.side_spend) if trace.side_spend else ()
        route = trace.route
        uncached, cached, written, output, _, _ = tokens  # `tokens.input`, without its reads
        if not (uncached or cached or written or output or side or route):
            return NOTHING  # refused, failed before an answer, or nothing reported
        alias = trace.alias or call.model
        rates = self._catalog.rates(alias, trace.upstream_model)
        default = self._catalog.rates(route.default) if route is not None else None
        own = None
        if tier is _FLEX or tier is _PRIORITY:
            own = self._catalog.tier_rates(alias, tier, trace.upstream_model)
        return bill(
            tokens=tokens,
            rates=rates,
            batch=trace.batch,
            default=default,
            trimmed=trace.trimmed_input,
            side=side,
            tier=own,
        )

    def _served(self, call: Call, cache: CacheResult, usage: Mapping[str, Any] | None) -> Bill:
        """A cache hit or a coalesced request spent nothing; it saved what the answer cost."""
        if cache.alias and cache.outcome is _HIT:  # priced by the result alone: remembered
            known = self._hit_bills.get(id(cache))
            if known is not None and known[0] is cache:
                return known[1]
            found = self._priced(call, cache, usage)
            if len(self._hit_bills) >= HIT_BILLS:
                self._hit_bills.clear()
            self._hit_bills[id(cache)] = (cache, found)
            return found
        return self._priced(call, cache, usage)

    def _priced(self, call: Call, cache: CacheResult, usage: Mapping[str, Any] | None) -> Bill:
        trace = call.ctx.trace
        if cache.alias:  # what answered the entry (or the shared request), not what was asked
            rates = self._catalog.rates(cache.alias, cache.upstream_model)
        else:
            rates = self._catalog.rates(trace.alias or call.model, trace.upstream_model)
        if cache.outcome is _HIT:
            written = min(cache.saved_written, max(0, cache.saved_input - cache.saved_cached))
            tokens = Tokens(
                max(0, cache.saved_input - cache.saved_cached - written),
                min(cache.saved_cached, cache.saved_input),
                written,
                cache.saved_output,
                _REPORTED,
                min(cache.saved_written_1h, written),
            )
            lever = _LEVERS[cache.cache]
        else:
            tokens, lever = from_usage(usage), Lever.COALESCED
        saved = cost(tokens, rates)
        return Bill(0.0, 0.0, (), {lever: saved} if saved else NO_SAVINGS)

    def price(self, spend: Spend) -> Side:
        """A side spend in dollars, at its alias's rates."""
        tokens = Tokens(spend.input_uncached, spend.cached_read, spend.cache_write, spend.output)
        return Side(spend.alias, spend.purpose, cost(tokens, self._catalog.rates(spend.alias)))


class LedgerMetrics:
    """The ledger's counters, in the gateway's registry."""

    def __init__(self, settings: LedgerSettings, registry: CollectorRegistry) -> None:
        labels = ("model", "tenant", "feature")
        self.spend = Counter(
            "levergate_spend_usd",
            "Everything the gateway spent, by the model that spent it, tenant, feature and "
            "kind: kind=answer for the answer a client got, the side spend's purpose (cascade, "
            "summary, judge), or shadow for a cascade's or a route's shadow samples, which the "
            "gateway spends on its own and charges to no request. Without kind=shadow it is "
            "the dollars of levergate_cost_usd_total (which labels them by the model asked "
            "for, per upstream) split by tenant and kind; authenticated requests only.",
            (*labels, "kind"),
            registry=registry,
        )
        self.savings = Counter(
            "levergate_savings_usd",
            "Dollars saved by lever against its counterfactual (policies/pricing.py); the "
            "negative parts are in levergate_overspend_usd_total.",
            ("lever", *labels),
            registry=registry,
        )
        self.overspend = Counter(
            "levergate_overspend_usd",
            "Dollars a lever cost more than its counterfactual (an escalated cascade, a "
            "prompt-cache write not yet read): net saving = savings - overspend.",
            ("lever", *labels),
            registry=registry,
        )
        self._bounded = LabelValues(
            ("model", "tenant", "feature"), max_values=settings.max_label_values
        )
        self._max_sets = settings.max_label_sets
        self._sets: set[tuple[str, str, str]] = set()
        # Admitted combinations as they arrived (raw == bounded), for one dict look-up per
        # request; never larger than `max_label_sets`.
        self._admitted: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._children: dict[tuple[Counter, tuple[str, ...]], Any] = {}

    def labels(self, *, model: str, tenant: str, feature: str) -> tuple[str, str, str]:
        raw = (model, tenant, feature)
        found = self._admitted.get(raw)
        if found is not None:
            return found
        wanted = (
            self._bounded("model", model),
            self._bounded("tenant", tenant),
            self._bounded("feature", feature),
        )
        if wanted in self._sets:
            return wanted
        if len(self._sets) < self._max_sets:
            self._sets.add(wanted)
            if wanted == raw:
                self._admitted[raw] = wanted
            return wanted
        return (OTHER, OTHER, OTHER)

    def inc(self, metric: Counter, labels: tuple[str, ...], value: float) -> None:
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = hot.counter(metric.labels(*labels))
        child.inc(value)


class OwnSpend:
    """What the gateway spends on its own initiative, outside any client request: a cascade's
    and a route's shadow calls (layers/shadow.py). Priced like a side spend and counted in
    `levergate_spend_usd` under the tenant and feature it was spent for, with the spend's purpose
    as its kind. It is in no request's record, so neither in `levergate_cost_usd` nor charged to
    a key's budget: the operator chose to spend it, not the client."""

    def __init__(self, ledger: Ledger, metrics: LedgerMetrics | None) -> None:
        self._ledger = ledger
        self._m = metrics  # None: the ledger's series are off (`ledger.enabled`)

    def charge(self, spend: Spend, *, tenant: str, feature: str) -> float:
        """Price `spend` and count it; returns its dollars."""
        usd = self._ledger.price(spend).usd
        if self._m is not None and usd > 0:
            labels = self._m.labels(model=spend.alias, tenant=tenant, feature=feature)
            self._m.inc(self._m.spend, (*labels, spend.purpose), usd)
        return usd


class LedgerSink:
    """`Sink`: a record's spend and savings into `LedgerMetrics`. Authenticated requests only
    (one refused before Authenticate spent nothing and takes no label slot)."""

    name = "ledger"

    def __init__(self, metrics: LedgerMetrics) -> None:
        self._m = metrics

    def emit(self, record: RequestRecord) -> None:
        # The fields read by position, once (as `PrometheusSink.emit` does): a `NamedTuple`
        # field read by name is an unspecialised look-up on CPython 3.11 (~100 instructions).
        tenant, feature, cost_usd, savings, side = (
            record[12], record[6], record[3], record[22], record[31]
        )  # fmt: skip
        if tenant is None or not (cost_usd or savings):
            return
        m = self._m
        labels = m.labels(model=record.answered_model, tenant=tenant, feature=feature)
        answer = cost_usd - sum(s.usd for s in side) if side else cost_usd
        if answer > 0:
            m.inc(m.spend, (*labels, "answer"), answer)
        for spent in side:
            if spent.usd > 0:
                where = m.labels(model=spent.alias, tenant=tenant, feature=feature)
                m.inc(m.spend, (*where, spent.purpose), spent.usd)
        for lever, saved in savings.items():
            if saved > 0:
                m.inc(m.savings, (lever, *labels), saved)
            elif saved < 0:
                m.inc(m.overspend, (lever, *labels), -saved)
