"""Per-call controls take effect end to end, however they are given: as `x-levergate-*` headers
from the official OpenAI SDK (`extra_headers`) to the proxy on loopback, and as the library's
typed arguments (`priority=`, `feature=`, `cache=`, `controls=`) in-process. A bad value is a
400 naming the header, never a 500. Simulator <- levergate <- client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from levergate import CachePolicy, Controls, Deps, Gateway, Priority, RequestRecord, Settings
from levergate.errors import BadRequest
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Capital of Peru?"}]
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Capital of Peru?"}]


def settings(sim: SimHandle) -> dict[str, Any]:
    # A concurrency cap puts the Limits layer in front of the upstream: it counts each
    # admitted request under its priority class.
    upstream = {"name": "sim", "base_url": sim.base_url, "limits": {"max_concurrency": 8}}
    return {"upstreams": [upstream], "models": [{"name": "*", "upstream": "sim"}]}


def generations(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0))


def count(metrics: str, name: str, **labels: str) -> float:
    """The value of the sample `name` whose labels include `labels` (0 when there is none)."""
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0


@pytest.fixture
async def proxy(sim: SimHandle, gateway_for: GatewayFactory) -> AsyncIterator[str]:
    async with gateway_for(**settings(sim)) as url:
        yield url


async def test_header_controls_from_the_sdk_take_effect(sim: SimHandle, proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=proxy, api_key="-", max_retries=0) as client:

        async def ask(**headers: str) -> Any:
            return await client.chat.completions.with_raw_response.create(
                model="m", messages=QUESTION, max_tokens=4, temperature=0,
                extra_headers={k.replace("_", "-"): v for k, v in headers.items()},
            )  # fmt: skip

        first = await ask(x_levergate_priority="interactive", x_levergate_feature="search")
        assert first.headers["x-levergate-cache"] == "miss"
        again = await ask()
        assert again.headers["x-levergate-cache"] == "hit"
        refreshed = await ask(cache_control="no-cache")
        assert refreshed.headers["x-levergate-cache"] != "hit"
        assert generations(sim) == 2  # the bypass went upstream, the hit did not
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(proxy.removesuffix("/v1") + "/metrics")).text
    assert count(metrics, "levergate_requests_total", feature="search") == 1
    waited = "levergate_limit_wait_seconds_count"
    assert count(metrics, waited, priority="interactive") == 1
    assert count(metrics, waited, priority="default") == 1


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-levergate-priority", "urgent"),
        ("x-levergate-timeout", "nan"),
        ("x-levergate-cache-ttl", "-5"),
        ("x-levergate-feature", "x" * 500),
        ("x-levergate-tenant", "t" * 500),
        ("x-levergate-workflow", "a b"),
    ],
)
async def test_a_bad_control_is_a_400_naming_its_header(
    sim: SimHandle, proxy: str, header: str, value: str
) -> None:
    async with openai.AsyncOpenAI(base_url=proxy, api_key="-", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="m", messages=QUESTION, max_tokens=4, extra_headers={header: value}
            )
    assert caught.value.status_code == 400
    assert header in caught.value.message
    assert generations(sim) == 0


async def test_library_typed_options_take_effect(sim: SimHandle) -> None:
    records: list[RequestRecord] = []

    class Collect:
        def emit(self, record: RequestRecord) -> None:
            records.append(record)

    gw = Gateway(Settings.load(**settings(sim)), deps=Deps(sinks=[Collect()]))
    async with gw:
        ask: dict[str, Any] = {
            "model": "m",
            "messages": MESSAGES,
            "max_tokens": 4,
            "temperature": 0,
        }
        await gw.chat(**ask, priority="interactive", feature="search")
        await gw.chat(**ask)  # an exact hit
        await gw.chat(**ask, cache=False)  # neither read nor written: upstream again
        await gw.chat(**ask, cache=CachePolicy(lookup=False), timeout=30)  # refreshed
        await gw.chat(**ask, controls=Controls(priority=Priority.BATCH, feature="nightly"))
        with pytest.raises(BadRequest) as caught:
            await gw.chat(**ask, priority="urgent")
        assert caught.value.param == "priority"
        async with httpx.AsyncClient(transport=GatewayTransport(gw)) as http:
            metrics = (await http.get("http://levergate/metrics")).text
    assert generations(sim) == 3
    assert [r.feature for r in records if r.feature] == ["search", "nightly"]
    waited = "levergate_limit_wait_seconds_count"
    assert count(metrics, waited, priority="interactive") == 1
    assert count(metrics, waited, priority="batch") == 0  # the nightly call was an exact hit
    assert count(metrics, waited, priority="default") == 2
