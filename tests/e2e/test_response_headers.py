"""What a request did, in its response headers, read by the official OpenAI SDK through the proxy
in front of the simulator: the alias that answered (a route's choice), attempts and retries, the
cost and savings of a whole answer (priced from the usage the client got), the key's budget
left; a stream's head carries what is known at its first token; all of it can be turned off."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types import CompletionUsage

from levergate.simulator import SimHandle
from tests.e2e.conftest import USER, GatewayFactory

PRICE = {"input": 1.0, "output": 2.0}  # USD per million tokens
STRONG = {"input": 10.0, "output": 30.0}
KEY = "lg-ops-headers-key-0123"
BUDGET = 1.0


def settings(sim: SimHandle, **more: Any) -> dict[str, Any]:
    return {
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [
            {"name": "cheap", "upstream": "sim", "upstream_model": "sim-small", "price": PRICE},
            {"name": "smart", "upstream": "sim", "upstream_model": "sim-large", "price": STRONG},
        ],
        "routing": {"routes": [{"name": "auto", "default": "smart",
                                "rules": [{"name": "faq", "to": "cheap",
                                           "when": {"feature": ["faq"]}}]}]},
        **more,
    }  # fmt: skip


def cost(usage: CompletionUsage | None, price: dict[str, float]) -> float:
    assert usage is not None
    return (usage.prompt_tokens * price["input"] + usage.completion_tokens * price["output"]) / 1e6


async def test_a_whole_answer_says_who_answered_and_what_it_cost_and_saved(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(**settings(sim)) as url:
        sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        raw = await sdk.chat.completions.with_raw_response.create(
            model="auto", messages=USER, max_tokens=5, extra_headers={"x-levergate-feature": "faq"}
        )
        usage = raw.parse().usage
        assert usage is not None
        headers = raw.headers
        assert headers["x-levergate-model"] == "cheap"  # the route's choice
        assert (headers["x-levergate-attempts"], headers["x-levergate-retries"]) == ("1", "0")
        assert float(headers["x-levergate-cost-usd"]) == pytest.approx(cost(usage, PRICE), abs=1e-8)
        # The route saved what `smart` would have charged for the same tokens, less the cost.
        saved = cost(usage, STRONG) - cost(usage, PRICE)
        assert float(headers["x-levergate-savings-usd"]) == pytest.approx(saved, abs=1e-8)
        assert "x-levergate-budget-remaining-usd" not in headers  # no key, no budget

        # The same request again (temperature 0): an exact-cache hit spent nothing and saved
        # what the answer cost; no alias answered it.
        first, hit = [
            await sdk.chat.completions.with_raw_response.create(
                model="cheap", messages=USER, max_tokens=5, temperature=0
            )
            for _ in range(2)
        ]
        assert hit.headers["x-levergate-cache"] == "hit"
        assert "x-levergate-model" not in hit.headers
        assert (hit.headers["x-levergate-attempts"], hit.headers["x-levergate-cost-usd"]) == (
            "0", "0.00000000",
        )  # fmt: skip
        assert hit.headers["x-levergate-savings-usd"] == first.headers["x-levergate-cost-usd"]
        await sdk.close()


async def test_a_stream_head_carries_what_is_known_at_its_first_token(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(**settings(sim)) as url:
        sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        async with sdk.chat.completions.with_streaming_response.create(
            model="smart", messages=USER, max_tokens=5, stream=True
        ) as raw:
            headers = raw.headers
            assert [chunk async for chunk in await raw.parse()]
        await sdk.close()
    assert headers["x-levergate-model"] == "smart"
    assert headers["x-levergate-attempts"] == "1"
    assert "x-levergate-cost-usd" not in headers
    assert "x-levergate-savings-usd" not in headers


async def test_a_keys_budget_left_counts_down_request_by_request(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    auth = {"enabled": True, "store": {"backend": "memory"}, "spend": {"backend": "memory"},
            "keys": [{"key": KEY, "tenant": "acme", "daily_budget_usd": BUDGET}]}  # fmt: skip
    async with gateway_for(**settings(sim, auth=auth)) as url:
        sdk = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)
        spent = 0.0
        for _ in range(3):
            raw = await sdk.chat.completions.with_raw_response.create(
                model="smart", messages=USER, max_tokens=50
            )
            usage = raw.parse().usage
            spent += cost(usage, STRONG)
            left = float(raw.headers["x-levergate-budget-remaining-usd"])
            assert left == pytest.approx(BUDGET - spent, abs=1e-7)
        await sdk.close()


async def test_every_header_can_be_turned_off(sim: SimHandle, gateway_for: GatewayFactory) -> None:
    off = {"response_headers": {"model": False, "attempts": False, "cost": False, "budget": False}}
    async with gateway_for(**settings(sim, server=off)) as url:
        sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        raw = await sdk.chat.completions.with_raw_response.create(
            model="cheap", messages=USER, max_tokens=3
        )
        await sdk.close()
    named = {"model", "attempts", "retries", "cost-usd", "savings-usd", "budget-remaining-usd"}
    assert not {f"x-levergate-{name}" for name in named} & set(raw.headers)
    assert raw.headers["x-levergate-overhead-ms"]  # the gateway's own headers stay


async def test_with_metrics_off_the_headers_still_come_and_nothing_is_recorded(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    async with gateway_for(**settings(sim, metrics={"enabled": False})) as url:
        sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        raw = await sdk.chat.completions.with_raw_response.create(
            model="cheap", messages=USER, max_tokens=3
        )
        await sdk.close()
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url.removesuffix("/v1") + "/metrics")).text
    assert float(raw.headers["x-levergate-cost-usd"]) == pytest.approx(
        cost(raw.parse().usage, PRICE), abs=1e-8
    )
    assert raw.headers["x-levergate-model"] == "cheap"
    assert "levergate_requests_total{" not in metrics


async def test_a_clients_model_name_behind_the_wildcard_is_encoded_never_a_500(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    """Found by the fuzz test: a name with NUL and right-to-left marks, written as it was,
    failed the response head (latin-1) and made a 500; with CR LF it would split the head."""
    async with gateway_at(sim.base_url) as url, httpx.AsyncClient() as http:
        for name, header in (
            ("\u0000\u202e\U0001f600", "%00%E2%80%AE%F0%9F%98%80"),
            ("m\r\nx-injected: 1", "m%0D%0Ax-injected:%201"),
        ):
            body = {"model": name, "messages": USER, "max_tokens": 3}
            answer = await http.post(f"{url}/chat/completions", json=body)
            assert answer.status_code == 200
            assert answer.headers["x-levergate-model"] == header
            assert "x-injected" not in answer.headers
