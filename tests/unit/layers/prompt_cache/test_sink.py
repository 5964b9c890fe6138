"""PromptCacheSink over Measure: expected against actual cached prompt tokens by alias, the
request outcomes, and a label set bounded by the configured aliases."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from levergate.catalog import Catalog
from levergate.config import MetricsSettings, PriceSettings, Settings
from levergate.core.call import Call, Context
from levergate.core.controls import Principal
from levergate.core.reply import Completed
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.measure.record import RequestRecord
from levergate.layers.measure.recorder import Recorder
from levergate.layers.prompt_cache.sink import OUTCOMES, PromptCacheSink, outcome

USAGE: dict[str, object] = {
    "prompt_tokens": 3000,
    "completion_tokens": 10,
    "prompt_tokens_details": {"cached_tokens": 2048},
}


class Upstream:
    """An alias's stack that expected `expected` cached tokens and got USAGE back."""

    def __init__(self, expected: int, usage: dict[str, object]) -> None:
        self.expected = expected
        self.usage = usage

    async def __call__(self, call: Call) -> Completed:
        call.ctx.trace.alias = call.model
        call.ctx.trace.expected_cached = self.expected
        return Completed(data={"usage": self.usage})


async def run(
    calls: list[tuple[str, int, dict[str, object]]],
) -> tuple[Telemetry, list[RequestRecord]]:
    telemetry = Telemetry(MetricsSettings())
    sink = PromptCacheSink(aliases=["claude"], registry=telemetry.registry)
    seen: list[RequestRecord] = []

    class Records:
        def emit(self, record: RequestRecord) -> None:
            seen.append(record)

    catalog = Catalog.of_prices({"claude": PriceSettings(input=3.0, output=15.0)})
    for model, expected, usage in calls:
        body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
        recorder = Recorder(telemetry, catalog=catalog, sinks=[sink, Records()])
        measure = Measure(Upstream(expected, usage), recorder=recorder)
        await measure(
            Call(kind="chat", body=body, ctx=Context("r", principal=Principal(tenant="t")))
        )
        await asyncio.sleep(0)
    return telemetry, seen


def value(telemetry: Telemetry, name: str, **labels: str) -> float:
    found = telemetry.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_expected_and_actual_cached_tokens_are_counted_by_alias() -> None:
    cold: dict[str, object] = {"prompt_tokens": 3000, "completion_tokens": 10}
    telemetry, records = await run([("claude", 0, cold), ("claude", 2560, USAGE),
                                    ("claude", 2560, cold)])  # fmt: skip
    assert [r.expected_cached for r in records] == [0, 2560, 2560]  # carried into the record
    assert value(telemetry, "levergate_prompt_cache_prompt_tokens_total", model="claude") == 9000
    assert value(telemetry, "levergate_prompt_cache_read_tokens_total", model="claude") == 2048
    assert value(telemetry, "levergate_prompt_cache_expected_tokens_total", model="claude") == 5120
    counts = {o: value(telemetry, "levergate_prompt_cache_requests_total", model="claude",
                       outcome=o) for o in OUTCOMES}  # fmt: skip
    assert counts == {"hit": 1.0, "missed": 1.0, "unexpected_hit": 0.0, "cold": 1.0}


async def test_names_beyond_the_configured_aliases_are_other() -> None:
    calls = [(f"client-name-{i}", 0, USAGE) for i in range(50)]
    telemetry, _ = await run(calls)
    labels = {
        s.labels["model"]
        for metric in telemetry.registry.collect()
        if metric.name == "levergate_prompt_cache_read_tokens"
        for s in metric.samples
    }
    assert labels == {"other"}
    assert value(telemetry, "levergate_prompt_cache_read_tokens_total", model="other") == 50 * 2048


def test_the_sink_is_built_only_with_the_optimizer_and_metrics_on() -> None:
    base: dict[str, Any] = {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:1/v1"}],
            "models": [{"name": "m", "upstream": "u"}]}  # fmt: skip
    on = Settings.load(**base)
    assert PromptCacheSink.of(on, registry=CollectorRegistry()) is not None
    off = Settings.load(**base, prompt_cache={"enabled": False})
    assert PromptCacheSink.of(off, registry=CollectorRegistry()) is None
    dark = Settings.load(**base, metrics={"enabled": False})
    assert PromptCacheSink.of(dark, registry=CollectorRegistry()) is None


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_every_request_has_exactly_one_outcome(expected: int, read: int) -> None:
    name = OUTCOMES[outcome(expected=expected, read=read)]
    assert (name in ("hit", "unexpected_hit")) == (read > 0)
    assert (name in ("hit", "missed")) == (expected > 0)
