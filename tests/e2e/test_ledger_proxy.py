"""The cost ledger end to end: the official OpenAI SDK through the proxy to the simulator (which
reports provider prompt-cache reads inside prompt_tokens), priced from the built-in catalog, and
/metrics scraped for spend and savings by lever, model, tenant and feature."""

from __future__ import annotations

import asyncio
import re

import httpx
import openai
import pytest

from levergate.app import build_gateway
from levergate.catalog import Catalog
from levergate.config import Settings
from levergate.layers.cache.entries import CACHE_HEADER
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

# A shared prefix well over the simulator's 1,024-token prompt-cache minimum (4 chars a token).
PREFIX = "You are a careful assistant. Answer in one short sentence. " * 90
MODEL = "gpt-4o-mini"


def sample(metrics: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text, by exact labels (0 when absent)."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.index("}") + 1]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_spend_and_savings_by_lever_are_priced_from_the_simulators_usage(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    upstreams = [{"name": "sim", "base_url": sim.base_url}]
    models = [{"name": MODEL, "upstream": "sim"}]  # priced by the built-in table
    price = Catalog.build(Settings.load(upstreams=upstreams, models=models)).rates(MODEL)
    assert (price.input, price.cache_read, price.output) == (0.15, 0.075, 0.60)
    async with gateway_for(upstreams=upstreams, models=models) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        headers = {"x-levergate-tenant": "acme", "x-levergate-feature": "faq"}
        spent = 0.0
        cached_total = 0
        usages = []
        for question in ("Who wrote Hamlet?", "Who painted the Mona Lisa?", "Who wrote Hamlet?"):
            reply = await client.chat.completions.create(
                model=MODEL, max_tokens=8, temperature=0, extra_headers=headers,
                messages=[{"role": "system", "content": PREFIX},
                          {"role": "user", "content": question}],
            )  # fmt: skip
            assert reply.usage is not None
            usages.append(reply.usage)
        # The third request is an exact-cache hit of the first: the same usage, replayed.
        first, second, third = usages
        assert third.model_dump() == first.model_dump()
        for usage in (first, second):
            details = usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            cached_total += cached
            spent += ((usage.prompt_tokens - cached) * price.input + cached * price.cache_read
                      + usage.completion_tokens * price.output) / 1e6  # fmt: skip
        assert cached_total > 0, "the simulator's prompt cache should have hit the shared prefix"
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url.removesuffix("/v1") + "/metrics")).text
        await client.close()
    labels = {"model": MODEL, "tenant": "acme", "feature": "faq"}
    assert sample(metrics, "levergate_spend_usd_total", **labels, kind="answer") == (
        pytest.approx(spent, rel=1e-6)
    )
    # Provider prompt cache: cached reads at (input - cached input); gpt-4o-mini has no write
    # premium, so nothing is netted off.
    saved = cached_total * (price.input - price.cache_read) / 1e6
    assert sample(metrics, "levergate_savings_usd_total", lever="prompt_cache", **labels) == (
        pytest.approx(saved, rel=1e-6)
    )
    # The exact hit saved exactly what the first (miss) request cost.
    details = first.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    miss = ((first.prompt_tokens - cached) * price.input + cached * price.cache_read
            + first.completion_tokens * price.output) / 1e6  # fmt: skip
    assert sample(metrics, "levergate_savings_usd_total", lever="exact", **labels) == (
        pytest.approx(miss, rel=1e-6)
    )
    # The older per-upstream cost series agrees with the ledger's spend.
    assert sample(metrics, "levergate_cost_usd_total", model=MODEL, upstream="sim",
                  feature="faq") == pytest.approx(spent, rel=1e-6)  # fmt: skip


class Records:
    """A sink that keeps every finished request's record."""

    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


async def test_an_exact_hit_on_a_route_alias_saves_the_price_of_the_model_that_answered(
    sim: SimHandle,
) -> None:
    # "auto" has no price of its own: the hit must be priced at gpt-4o-mini, which the route
    # chose for the miss (the strong default, gpt-4o, costs ~17x more: a wrong model shows).
    upstreams = [{"name": "sim", "base_url": sim.base_url}]
    models = [{"name": MODEL, "upstream": "sim"}, {"name": "gpt-4o", "upstream": "sim"}]
    routing = {"routes": [{"name": "auto", "default": "gpt-4o", "rules": [
        {"name": "faq", "to": MODEL, "when": {"feature": ["faq"]}}]}]}  # fmt: skip
    settings = Settings.load(upstreams=upstreams, models=models, routing=routing)
    price = Catalog.build(settings).rates(MODEL)
    records = Records()
    body = {"model": "auto", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Who wrote Hamlet?"}]}  # fmt: skip
    headers = {"x-levergate-tenant": "acme", "x-levergate-feature": "faq"}
    async with build_gateway(settings, deps=Deps(sinks=[records])) as gw, httpx.AsyncClient(
        transport=GatewayTransport(gw), base_url="http://levergate"
    ) as http:  # fmt: skip
        answers = [await http.post("/v1/chat/completions", json=body, headers=headers)
                   for _ in range(2)]  # fmt: skip
        for _ in range(200):  # records are emitted once the answer has gone out
            if len(records.seen) == 2:
                break
            await asyncio.sleep(0.01)
        metrics = (await http.get("/metrics")).text
    assert [a.headers[CACHE_HEADER] for a in answers] == ["miss", "hit"]
    usage = answers[0].json()["usage"]  # a short prompt: no provider prompt-cache read
    first = (usage["prompt_tokens"] * price.input + usage["completion_tokens"] * price.output) / 1e6
    assert first > 0
    miss, hit = records.seen
    assert miss.alias == MODEL
    assert miss.cost_usd == pytest.approx(first, rel=1e-9)
    assert hit.cost_usd == 0.0
    assert hit.savings == {"exact": pytest.approx(first, rel=1e-9)}
    labels = {"model": MODEL, "tenant": "acme", "feature": "faq"}
    assert sample(metrics, "levergate_savings_usd_total", lever="exact", **labels) == (
        pytest.approx(first, rel=1e-6)
    )
