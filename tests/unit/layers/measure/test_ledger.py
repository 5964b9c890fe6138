"""The ledger through Measure: each lever's saving read from the call's typed record, the side
spends added at their own alias's price, the record carrying it all, and the dollar series of
/metrics bounded by tenant and feature."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from levergate.catalog import Catalog
from levergate.config import Auth, Ledger, Metrics, Price
from levergate.core.call import Call, Context, RouteDecision, Spend
from levergate.core.reply import Completed, Reply
from levergate.layers.auth import Authenticate
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.measure.record import RequestRecord

# $ per million: "strong" 10 in / 30 out (cached 1), "cheap" 1 in / 2 out (cached 0.1).
PRICES = {
    "strong": Price(input=10.0, output=30.0, cache_read=1.0, batch_discount=0.5),
    "cheap": Price(input=1.0, output=2.0, cache_read=0.1),
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
    telemetry = telemetry or Telemetry(Metrics())
    records = Records()
    measure = Measure(Authenticate(inner, settings=Auth()), telemetry=telemetry,
                      catalog=Catalog.of_prices(PRICES), sinks=[records])  # fmt: skip
    headers = {"x-levergate-tenant": tenant}
    body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
    await measure(Call("chat", body, Context("r", feature=feature, headers=headers)))
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
    telemetry = Telemetry(Metrics(), ledger=Ledger(max_label_values=2, max_label_sets=3))
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
    telemetry = Telemetry(Metrics(), ledger=Ledger(enabled=False))
    record, _ = await run(Answers("cheap", mark=route), telemetry=telemetry)
    assert record.savings  # the record still carries it for other sinks
    assert telemetry.ledger is None
    names = {m.name for m in telemetry.registry.collect()}
    assert "levergate_savings_usd" not in names
