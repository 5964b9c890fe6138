"""The ledger through Measure: each lever's saving read from the call's typed record, the side
spends added at their own alias's price, the record carrying it all, and the dollar series of
/metrics bounded by tenant and feature."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.catalog import Catalog
from levergate.config import AuthSettings, LedgerSettings, MetricsSettings, PriceSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Context, RouteDecision, Spend
from levergate.core.controls import Controls
from levergate.core.reply import Completed, Reply
from levergate.layers.auth import Authenticate
from levergate.layers.measure.ledger import HIT_BILLS, Ledger
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.measure.record import RequestRecord
from levergate.layers.measure.recorder import Recorder
from levergate.policies.pricing import Lever, Tokens
from levergate.policies.tiers import Tier

# $ per million: "strong" 10 in / 30 out (cached 1), "cheap" 1 in / 2 out (cached 0.1).
PRICES = {
    "strong": PriceSettings(input=10.0, output=30.0, cache_read=1.0, batch_discount=0.5),
    "cheap": PriceSettings(input=1.0, output=2.0, cache_read=0.1),
}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}


class Answers:
    """An alias's stack that answers as `alias` and leaves what `mark` writes in the trace."""

    def __init__(self, alias: str, *, usage: dict[str, Any] | None = None, mark: Any = None):
        self.alias, self.usage, self.mark = alias, usage or USAGE, mark

    async def __call__(self, call: Call) -> Reply:
        trace = call.ctx.trace
        trace.alias, trace.upstream, trace.upstream_model = self.alias, "up", self.alias
        if self.mark is not None:
            self.mark(trace)
        return Completed(data={"usage": self.usage})


class Records:
    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


async def run(inner: Answers, *, tenant: str = "acme", feature: str = "chat",
              telemetry: Telemetry | None = None) -> tuple[RequestRecord, Telemetry]:  # fmt: skip
    telemetry = telemetry or Telemetry(MetricsSettings())
    records = Records()
    recorder = Recorder(telemetry, catalog=Catalog.of_prices(PRICES), sinks=[records])
    measure = Measure(Authenticate(inner, settings=AuthSettings()), recorder=recorder)
    headers = {"x-levergate-tenant": tenant}
    body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
    await measure(
        Call("chat", body, Context("r", headers=headers, controls=Controls(feature=feature)))
    )
    await asyncio.sleep(0)
    (record,) = records.seen
    return record, telemetry


def sample(telemetry: Telemetry, name: str, **labels: str) -> float:
    return telemetry.registry.get_sample_value(name, labels) or 0.0


def route(trace: Any) -> None:
    trace.route = RouteDecision("rules", "auto", "cheap", "strong", reason="short prompt")


async def test_a_routed_answer_saves_the_strong_models_cost_on_the_same_tokens() -> None:
    record, telemetry = await run(Answers("cheap", mark=route))
    # cheap: 1000 x 1 + 100 x 2 = 1200 -> $0.0012; strong: 1000 x 10 + 100 x 30 = 13000.
    assert record.cost_usd == pytest.approx(0.0012)
    assert record.savings == {"route": pytest.approx(0.0118)}
    labels = {"model": "cheap", "tenant": "acme", "feature": "chat"}
    assert sample(telemetry, "levergate_spend_usd_total", **labels, kind="answer") == (
        pytest.approx(0.0012)
    )
    assert sample(telemetry, "levergate_savings_usd_total", lever="route", **labels) == (
        pytest.approx(0.0118)
    )


async def test_an_escalated_cascade_adds_the_cheap_attempt_and_reports_the_loss() -> None:
    def escalated(trace: Any) -> None:
        trace.route = RouteDecision("cascade", "cascade:cheap>strong", "strong", "strong")
        trace.escalations = 1
        trace.side_spend.append(Spend("cheap", "cascade", input_uncached=1000, output=50))

    record, telemetry = await run(Answers("strong", mark=escalated))
    # strong answer $0.013; the cheap attempt 1000 x 1 + 50 x 2 = 1100 -> $0.0011.
    assert record.cost_usd == pytest.approx(0.0141)
    assert [(s.alias, s.purpose) for s in record.side] == [("cheap", "cascade")]
    assert record.savings == {"route": pytest.approx(-0.0011)}
    common = {"tenant": "acme", "feature": "chat"}
    assert sample(telemetry, "levergate_spend_usd_total", model="cheap", **common,
                  kind="cascade") == pytest.approx(0.0011)  # fmt: skip
    assert sample(telemetry, "levergate_overspend_usd_total", lever="route", model="strong",
                  **common) == pytest.approx(0.0011)  # fmt: skip
    assert sample(telemetry, "levergate_savings_usd_total", lever="route", model="strong",
                  **common) == 0  # fmt: skip


async def test_trim_prompt_cache_and_batch_each_get_their_share() -> None:
    def marks(trace: Any) -> None:
        trace.trimmed_input = 2000
        trace.batch = True

    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 800}}
    record, _ = await run(Answers("strong", usage=usage, mark=marks))
    # Paid at half price: (200 x 10 + 800 x 1 + 100 x 30) / 2 = 2900 -> $0.0029.
    assert record.cost_usd == pytest.approx(0.0029)
    assert record.batch
    assert record.savings == {
        "batch": pytest.approx(0.0029),
        # 800 x (5 - 0.5) at the batched rates = 3600 -> $0.0036.
        "prompt_cache": pytest.approx(0.0036),
        # 2000 x 5 (batched input) = 10000 -> $0.01.
        "trim": pytest.approx(0.01),
    }
    assert record.tokens.cached_read == 800


async def test_tenants_and_features_beyond_the_bound_are_other() -> None:
    telemetry = Telemetry(
        MetricsSettings(), ledger=LedgerSettings(max_label_values=2, max_label_sets=3)
    )
    for n in range(5):
        await run(Answers("cheap"), tenant=f"t{n}", feature=f"f{n}", telemetry=telemetry)
    text = telemetry.registry.collect()
    tenants = {s.labels["tenant"] for m in text if m.name == "levergate_spend_usd"
               for s in m.samples if s.name.endswith("_total")}  # fmt: skip
    assert tenants == {"t0", "t1", "other"}
    # Five requests' spend is all there, whatever label it went under.
    total = sum(s.value for m in telemetry.registry.collect() if m.name == "levergate_spend_usd"
                for s in m.samples if s.name.endswith("_total"))  # fmt: skip
    assert total == pytest.approx(5 * 0.0012)


async def test_the_ledger_series_can_be_turned_off() -> None:
    telemetry = Telemetry(MetricsSettings(), ledger=LedgerSettings(enabled=False))
    record, _ = await run(Answers("cheap", mark=route), telemetry=telemetry)
    assert record.savings  # the record still carries it for other sinks
    assert telemetry.ledger is None
    names = {m.name for m in telemetry.registry.collect()}
    assert "levergate_savings_usd" not in names


# ---- service tiers (policies/tiers.py): the answer's own service_tier decides the price ----

TIERED = {
    "strong": PriceSettings.model_validate({
        "input": 10.0, "output": 30.0, "cache_read": 1.0,
        "flex": {"input": 5.0, "output": 15.0}, "priority": {"input": 20.0, "output": 60.0},
    }),
    "cheap": PRICES["cheap"],
}  # fmt: skip


class Tiered(Answers):
    """Answers with `service_tier` in the body (or none), having asked for `asked`."""

    def __init__(self, alias: str, *, served: str | None, asked: Tier | None, **kw: Any):
        super().__init__(alias, **kw)
        self.served, self.asked = served, asked

    async def __call__(self, call: Call) -> Reply:
        await super().__call__(call)
        call.ctx.trace.tier = self.asked
        data: dict[str, Any] = {"usage": self.usage}
        if self.served is not None:
            data["service_tier"] = self.served
        return Completed(data=data)


async def run_tiered(inner: Answers) -> RequestRecord:
    records = Records()
    recorder = Recorder(Telemetry(MetricsSettings()), catalog=Catalog.of_prices(TIERED),
                        sinks=[records])  # fmt: skip
    body = {"model": "strong", "messages": [{"role": "user", "content": "x"}]}
    await Measure(inner, recorder=recorder)(Call("chat", body, Context("r")))
    await asyncio.sleep(0)
    return records.seen[0]


async def test_a_flex_answer_is_priced_at_flex_and_saves_against_standard() -> None:
    record = await run_tiered(Tiered("strong", served="flex", asked=Tier.FLEX))
    # flex: 1000 x 5 + 100 x 15 = 6500 -> $0.0065; standard would be $0.013.
    assert (record.tier, record.tier_assumed) == ("flex", False)
    assert record.cost_usd == pytest.approx(0.0065)
    assert record.savings == {Lever.TIER: pytest.approx(0.0065)}


async def test_the_answer_decides_even_when_it_differs_from_what_was_asked() -> None:
    record = await run_tiered(Tiered("strong", served="priority", asked=Tier.FLEX))
    assert record.tier == "priority"
    assert record.savings == {Lever.TIER: pytest.approx(-0.013)}  # priority costs double
    standard = await run_tiered(Tiered("strong", served="default", asked=Tier.FLEX))
    assert standard.tier == "standard"
    assert standard.cost_usd == pytest.approx(0.013)
    assert not standard.savings


async def test_an_answer_that_names_no_tier_is_assumed_at_the_tier_asked() -> None:
    record = await run_tiered(Tiered("strong", served=None, asked=Tier.FLEX))
    assert (record.tier, record.tier_assumed) == ("flex", True)
    assert record.cost_usd == pytest.approx(0.0065)
    plain = await run_tiered(Tiered("strong", served=None, asked=None))
    assert (plain.tier, plain.tier_assumed) == ("standard", False)
    assert plain.cost_usd == pytest.approx(0.013)


async def test_a_tier_the_model_has_no_price_for_is_billed_at_standard() -> None:
    record = await run_tiered(Tiered("cheap", served="flex", asked=None))
    assert record.tier == "flex"
    assert record.cost_usd == pytest.approx(0.0012)
    assert record.savings == {}


async def test_route_and_tier_savings_add_up_without_counting_twice() -> None:
    records = Records()
    prices = {**TIERED, "big": PriceSettings(input=20.0, output=60.0)}
    recorder = Recorder(Telemetry(MetricsSettings()), catalog=Catalog.of_prices(prices),
                        sinks=[records])  # fmt: skip
    body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
    inner = Tiered(
        "strong",
        served="flex",
        asked=Tier.FLEX,
        mark=lambda t: setattr(t, "route", RouteDecision("rules", "auto", "strong", "big")),
    )
    await Measure(inner, recorder=recorder)(Call("chat", body, Context("r")))
    await asyncio.sleep(0)
    (record,) = records.seen
    # big at standard: $0.026; strong at standard $0.013; strong at flex $0.0065.
    assert record.savings == {Lever.ROUTE: pytest.approx(0.013), Lever.TIER: pytest.approx(0.0065)}
    assert sum(record.savings.values()) == pytest.approx(0.026 - record.cost_usd)


_HITS = st.builds(
    CacheResult,
    cache=st.sampled_from(["exact", "semantic"]),
    outcome=st.sampled_from([CacheOutcome.HIT, CacheOutcome.COALESCED]),
    saved_input=st.integers(0, 5000),
    saved_output=st.integers(0, 5000),
    saved_cached=st.integers(0, 5000),
    saved_written=st.integers(0, 5000),
    saved_written_1h=st.integers(0, 5000),
    alias=st.sampled_from(["", "strong", "cheap", "unpriced"]),
    upstream_model=st.sampled_from(["", "strong", "gpt-4o-mini"]),
)


@settings(max_examples=200, deadline=None)
@given(results=st.lists(_HITS, min_size=1, max_size=4),
       served=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["strong", "cheap", "x"])),
                       min_size=1, max_size=20))  # fmt: skip
def test_a_remembered_hit_bill_is_the_bill_priced_afresh(
    results: list[CacheResult], served: list[tuple[int, str]]
) -> None:
    """`Ledger` keeps a hit's bill by its cache result (one object per entry): each hit, in any
    order and whatever alias the call asked for, is billed as a fresh ledger bills it."""
    catalog = Catalog.of_prices(PRICES)
    ledger = Ledger(catalog)
    for at, asked in served:
        result = results[at % len(results)]
        call = Call(kind="chat", body={"model": asked}, ctx=Context(request_id="r"))
        call.ctx.trace.cache = result
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        fresh = Ledger(catalog).bill(call, Tokens(), usage)
        assert ledger.bill(call, Tokens(), usage) == fresh
        # An equal result that is another object is priced, not taken for the first.
        twin = dataclasses.replace(result)
        call.ctx.trace.cache = twin
        assert ledger.bill(call, Tokens(), usage) == fresh


def test_the_remembered_hit_bills_are_bounded() -> None:
    ledger = Ledger(Catalog.of_prices(PRICES))
    call = Call(kind="chat", body={"model": "strong"}, ctx=Context(request_id="r"))
    kept = []
    for n in range(HIT_BILLS + 5):
        call.ctx.trace.cache = CacheResult("exact", CacheOutcome.HIT, n, 1, alias="cheap")
        kept.append(call.ctx.trace.cache)  # alive: no id is reused
        saved = ledger.bill(call, Tokens(), None).savings[Lever.EXACT]
        assert saved == pytest.approx((n * 1.0 + 2.0) / 1e6)
        assert 1 <= len(ledger._hit_bills) <= HIT_BILLS
