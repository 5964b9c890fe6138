"""What the cascade and route shadow end-to-end tests share: a gateway on loopback with the
official OpenAI SDK in front, the simulator's aliases (`small`, `large`, its `twin`, and `stuck`
on a simulator that never answers), `/metrics` read back over HTTP and polled a bounded number
of times, and what one `large` call costs by the simulator's own usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator

LARGE = {"input": 10.0, "output": 30.0}  # $ per million tokens
HEADERS = {"x-levergate-tenant": "acme", "x-levergate-feature": "faq"}
Metrics = dict[tuple[str, frozenset[tuple[str, str]]], float]


@asynccontextmanager
async def simulators(**good: Any) -> AsyncIterator[tuple[SimHandle, SimHandle]]:
    """The provider (with `good`'s simulator settings), and one that never answers."""
    async with (
        run_simulator(SimSettings.model_validate({"port": 0, **good})) as provider,
        run_simulator(
            SimSettings.model_validate({"port": 0, "faults": {"hang_rate": 1.0}})
        ) as hung,
    ):
        yield provider, hung


def gateway_settings(good: SimHandle, hung: SimHandle, **sections: Any) -> dict[str, Any]:
    """Settings with `small` / `large` / `twin` on `good` and `stuck` on `hung`, no retries."""
    return {
        "server": {"port": 0},
        "traffic": {"retry": {"enabled": False}},
        "upstreams": [{"name": "sim", "base_url": good.base_url},
                      {"name": "hung", "base_url": hung.base_url}],
        "models": [
            {"name": "small", "upstream": "sim", "upstream_model": "sim-small"},
            {"name": "large", "upstream": "sim", "upstream_model": "sim-large", "price": LARGE},
            {"name": "twin", "upstream": "sim", "upstream_model": "sim-large"},
            {"name": "stuck", "upstream": "hung", "upstream_model": "sim-large"},
        ],
        **sections,
    }  # fmt: skip


@asynccontextmanager
async def proxy(settings: dict[str, Any]) -> AsyncIterator[tuple[openai.AsyncOpenAI, str]]:
    """The SDK (tenant acme, feature faq) and the /metrics URL of a gateway on loopback."""
    async with (
        Gateway(Settings.load(**settings)) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                           default_headers=HEADERS) as sdk,
    ):  # fmt: skip
        yield sdk, url.removesuffix("/v1") + "/metrics"


async def metrics(url: str) -> Metrics:
    async with httpx.AsyncClient() as http:
        text = (await http.get(url)).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Metrics, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


async def until(url: str, condition: Callable[[Metrics], bool]) -> Metrics:
    """/metrics once `condition` holds of it (polled a bounded number of times)."""
    for _ in range(400):
        found = await metrics(url)
        if condition(found):
            return found
        await asyncio.sleep(0.025)
    raise AssertionError("the shadow samples never finished")


def ask(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


async def large_usd(good: SimHandle, text: str) -> float:
    """What one call to sim-large with `text` costs at LARGE's prices, asked of the simulator."""
    async with openai.AsyncOpenAI(base_url=good.base_url, api_key="x") as direct:
        usage = (await direct.chat.completions.create(model="sim-large",
                                                      messages=ask(text))).usage  # fmt: skip
    assert usage is not None
    return (usage.prompt_tokens * LARGE["input"] + usage.completion_tokens * LARGE["output"]) / 1e6
