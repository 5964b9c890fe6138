"""Authenticate, Dispatch and Measure over an in-memory inner service."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest
from pydantic import SecretStr

from levergate.catalog import Catalog
from levergate.config import ApiKeySettings, AuthSettings, MetricsSettings, PriceSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Context
from levergate.core.controls import Controls
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import AuthenticationFailed, ModelNotFound, UpstreamUnavailable
from levergate.layers.auth import Authenticate
from levergate.layers.dispatch import Dispatch
from levergate.layers.measure.measure import OVERHEAD_HEADER, Measure, Telemetry
from levergate.layers.measure.recorder import Recorder


def call_with(
    headers: dict[str, str] | None = None, model: str = "m", *, feature: str = ""
) -> Call:
    """A call as it reaches Measure; its record says Authenticate established the tenant (as it
    would below), so its feature and model may be labels."""
    body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    call = Call(
        kind="chat",
        body=body,
        ctx=Context("r", headers=headers or {}, controls=Controls(feature=feature)),
    )
    call.ctx.trace.tenant = call.ctx.principal.tenant
    return call


class Scripted:
    def __init__(self, reply: Reply | None = None) -> None:
        self.calls: list[Call] = []
        self.reply = reply

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        return self.reply or Completed(data={"model": call.model})


async def test_auth_maps_keys_to_tenants_and_refuses_others() -> None:
    inner = Scripted()
    auth = Authenticate(
        inner,
        settings=AuthSettings(
            enabled=True, keys=[ApiKeySettings(key=SecretStr("k-1"), tenant="acme")]
        ),
    )
    await auth(call_with({"authorization": "Bearer k-1"}))
    assert inner.calls[-1].ctx.principal.tenant == "acme"
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": "Basic k-1"}):
        with pytest.raises(AuthenticationFailed):
            await auth(call_with(headers))
    assert len(inner.calls) == 1


async def test_without_auth_the_tenant_header_names_the_tenant() -> None:
    inner = Scripted()
    auth = Authenticate(inner, settings=AuthSettings())
    await auth(call_with({"x-levergate-tenant": "blue"}))
    await auth(call_with())
    assert [c.ctx.principal.tenant for c in inner.calls] == ["blue", "default"]


async def test_dispatch_resolves_aliases_then_the_wildcard_then_refuses() -> None:
    fast, anything = Scripted(), Scripted()
    dispatch = Dispatch({"fast": fast}, fallback=anything)
    await dispatch(call_with(model="fast"))
    await dispatch(call_with(model="other"))
    assert fast.calls[0].model == "fast"
    assert anything.calls[0].model == "other"
    with pytest.raises(ModelNotFound):
        await Dispatch({}, fallback=None)(call_with(model="ghost"))


def metric(telemetry: Telemetry, name: str, **labels: str) -> float:
    value = telemetry.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_measure_counts_tokens_cost_and_sets_the_overhead_header() -> None:
    telemetry = Telemetry(MetricsSettings())
    usage = {"prompt_tokens": 1000, "completion_tokens": 500,
             "prompt_tokens_details": {"cached_tokens": 200}}  # fmt: skip
    catalog = Catalog.of_prices({"m": PriceSettings(input=1.0, output=2.0, cache_read=0.5)})
    measure = Measure(
        Scripted(Completed(data={"usage": usage})),
        recorder=Recorder(telemetry, catalog=catalog),
    )
    call = call_with({"x-levergate-feature": "search"}, feature="search")
    call.ctx.trace.upstream = "up"
    reply = await measure(call)
    assert float(reply.headers[OVERHEAD_HEADER]) >= 0
    await asyncio.sleep(0)  # a whole answer's metrics are recorded once it has gone out
    common = {"model": "m", "upstream": "up", "feature": "search"}
    assert metric(telemetry, "levergate_tokens_total", **common, kind="input") == 1000
    assert metric(telemetry, "levergate_tokens_total", **common, kind="cached") == 200
    assert metric(telemetry, "levergate_cost_usd_total", **common) == pytest.approx(
        (800 * 1.0 + 200 * 0.5 + 500 * 2.0) / 1e6
    )
    labels = {"route": "chat", **common, "outcome": "ok"}
    assert metric(telemetry, "levergate_requests_total", **labels) == 1
    assert b"levergate_overhead_seconds_bucket" in generate_latest(telemetry.registry)


async def test_measure_records_ttft_at_the_first_generated_token_when_a_stream_closes() -> None:
    async def events() -> EventSource:
        yield Event(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}')
        yield Event(b'{"choices":[{"delta":{"content":"He"}}]}')
        yield Event(b'{"choices":[{"delta":{"content":"llo"}}]}')
        yield Event(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}')

    telemetry = Telemetry(MetricsSettings())
    measure = Measure(
        Scripted(Stream(events())), recorder=Recorder(telemetry, catalog=Catalog.of_prices({}))
    )
    reply = await measure(call_with())
    assert isinstance(reply, Stream)
    assert metric(telemetry, "levergate_in_flight") == 1
    assert len([e async for e in reply]) == 4
    await reply.aclose()
    await asyncio.sleep(0)  # recorded on the loop turn after the stream closed
    labels = {"route": "chat", "model": "m", "upstream": "", "feature": ""}
    assert metric(telemetry, "levergate_ttft_seconds_count", **labels) == 1
    assert metric(telemetry, "levergate_inter_token_seconds_count", **labels) == 1
    assert metric(telemetry, "levergate_tokens_total", model="m", upstream="", feature="",
                  kind="output") == 2  # fmt: skip
    assert metric(telemetry, "levergate_in_flight") == 0


async def test_measure_counts_failures_by_type_and_a_cut_stream_as_cancelled() -> None:
    class Failing:
        async def __call__(self, call: Call) -> Reply:
            raise UpstreamUnavailable("down")

    telemetry = Telemetry(MetricsSettings())
    recorder = Recorder(telemetry, catalog=Catalog.of_prices({}))
    with pytest.raises(UpstreamUnavailable):
        await Measure(Failing(), recorder=recorder)(call_with())

    async def endless() -> EventSource:
        while True:
            yield Event(b'{"choices":[{"delta":{"content":"x"}}]}')

    reply = await Measure(Scripted(Stream(endless())), recorder=recorder)(call_with())
    assert isinstance(reply, Stream)
    await anext(aiter(reply))
    await reply.aclose()
    await asyncio.sleep(0)
    base = {"route": "chat", "model": "m", "upstream": "", "feature": ""}
    assert metric(telemetry, "levergate_requests_total", **base, outcome="upstream_error") == 1
    assert metric(telemetry, "levergate_requests_total", **base, outcome="cancelled") == 1


def test_feature_labels_are_bounded() -> None:
    telemetry = Telemetry(MetricsSettings())
    labels = {telemetry.bounded("feature", f"f{i}") for i in range(500)}
    assert len(labels) == 101
    assert "other" in labels


async def test_answers_served_from_a_cache_are_not_counted_as_spent() -> None:
    telemetry = Telemetry(MetricsSettings())
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    catalog = Catalog.of_prices({"m": PriceSettings(input=1.0, output=1.0)})
    measure = Measure(Scripted(Completed(data={"usage": usage})),
                      recorder=Recorder(telemetry, catalog=catalog))  # fmt: skip
    hit = call_with()
    hit.ctx.trace.cache = CacheResult("exact", CacheOutcome.HIT, 10, 5)
    await measure(hit)
    await asyncio.sleep(0)
    assert metric(telemetry, "levergate_tokens_total", model="m", upstream="", feature="",
                  kind="input") == 0  # fmt: skip
    await measure(call_with())
    await asyncio.sleep(0)
    assert metric(telemetry, "levergate_tokens_total", model="m", upstream="", feature="",
                  kind="input") == 10  # fmt: skip
