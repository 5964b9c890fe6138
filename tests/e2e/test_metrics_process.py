"""`/metrics` as a scraper reads it: the process's own series (memory, CPU, descriptors, garbage
collection, the Python build), `levergate_build_info`, and the two money counters told apart by
their HELP texts — and agreeing in dollars, as the texts say."""

from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from levergate.simulator import SimHandle
from levergate.version import __version__
from tests.e2e.conftest import USER, GatewayFactory


async def test_process_series_build_info_and_money_counters_that_say_what_they_count(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    models = [{"name": "cheap", "upstream": "sim", "price": {"input": 1.0, "output": 2.0}}]
    async with gateway_for(upstreams=[{"name": "sim", "base_url": sim.base_url}],
                           models=models) as url:  # fmt: skip
        sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        for tenant in ("acme", "globex", "acme"):
            await sdk.chat.completions.create(
                model="cheap", messages=USER, max_tokens=7,
                extra_headers={"x-levergate-tenant": tenant},
            )  # fmt: skip
        await sdk.close()
        async with httpx.AsyncClient() as http:
            text = (await http.get(url.removesuffix("/v1") + "/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds",
                 "process_max_fds", "python_gc_collections", "python_info"):  # fmt: skip
        assert name in families, name
        assert families[name].samples
    assert families["process_resident_memory_bytes"].samples[0].value > 1_000_000
    build = families["levergate_build_info"].samples
    assert [(s.name, s.labels["version"], s.value) for s in build] == [
        ("levergate_build_info", __version__, 1.0)
    ]
    cost, spend = families["levergate_cost_usd"], families["levergate_spend_usd"]
    assert "levergate_spend_usd_total" in cost.documentation
    assert "shadow" in cost.documentation
    assert "levergate_cost_usd_total" in spend.documentation
    assert "by tenant" in cost.documentation
    total = sum(s.value for s in cost.samples if s.name.endswith("_total"))
    by_tenant = sum(
        s.value for s in spend.samples if s.name.endswith("_total") and s.labels["kind"] != "shadow"
    )
    assert total > 0
    assert by_tenant == pytest.approx(total, rel=1e-9)
    assert {s.labels["tenant"] for s in spend.samples} == {"acme", "globex"}
