"""/metrics stays bounded under crafted label values, and only authenticated callers name
labels: the gateway over HTTP in front of the simulator, the OpenAI SDK and httpx as clients."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle

USER = [{"role": "user", "content": "hi"}]


def settings(sim: SimHandle, **values: Any) -> Settings:
    return Settings.for_upstream(sim.base_url, server={"port": 0}, **values)


async def test_crafted_models_and_features_cannot_grow_metrics_past_the_series_bound(
    sim: SimHandle,
) -> None:
    """Issue 10 #5: bounded per label only, 20,000 crafted requests made /metrics 57 MB."""
    sets = 10
    async with (
        Gateway(settings(sim, metrics={"max_label_sets": sets})) as gateway,
        serving(gateway) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for i in range(120):
            body = {"model": f"crafted-{i}", "messages": USER, "max_tokens": 1}
            reply = await http.post(
                "/chat/completions", json=body, headers={"x-levergate-feature": f"f-{i}"}
            )
            assert reply.status_code == 200
        text = (await http.get(url.removesuffix("/v1") + "/metrics")).text
    assert 'model="other"' in text
    assert "crafted-119" not in text
    # About 4 KB of text per label set for whole answers, plus the fixed part.
    assert len(text) < sets * 8_000 + 20_000


async def test_refused_callers_take_no_feature_label_from_a_real_tenant(sim: SimHandle) -> None:
    """Issue 10 #6: 150 requests refused with 401 took every feature slot."""
    auth = {"enabled": True, "keys": [{"key": "sk-real", "tenant": "acme"}]}
    async with (
        Gateway(settings(sim, auth=auth)) as gateway,
        serving(gateway) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for i in range(150):
            body = {"model": "sim-small", "messages": USER}
            reply = await http.post(
                "/chat/completions", json=body, headers={"x-levergate-feature": f"probe-{i}"}
            )
            assert reply.status_code == 401
        async with openai.AsyncOpenAI(base_url=url, api_key="sk-real", max_retries=0) as sdk:
            await sdk.chat.completions.create(
                model="sim-small", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                extra_headers={"x-levergate-feature": "search"},
            )  # fmt: skip
        text = generate_latest(gateway.pipeline.telemetry.registry).decode()
    assert 'feature="search"' in text
    assert "probe-" not in text


async def test_a_scrape_is_written_off_the_event_loop(sim: SimHandle) -> None:
    """Issue 20, item 10: at the series cap a scrape (~1.4 MB of text) held the event loop up
    to 0.35 s. Collected where the gateway serves: never on the loop's thread."""
    seen: list[int] = []

    class Witness(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            seen.append(threading.get_ident())
            yield GaugeMetricFamily("witness", "Where the scrape ran.", value=1.0)

    async with (
        Gateway(settings(sim)) as gateway,
        serving(gateway) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        gateway.pipeline.telemetry.registry.register(Witness())
        seen.clear()
        text = (await http.get(url.removesuffix("/v1") + "/metrics")).text
    assert "witness 1.0" in text
    assert seen
    assert threading.get_ident() not in seen
