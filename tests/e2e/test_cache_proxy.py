"""The caches end to end: simulator <- levergate <- the official OpenAI SDK, all on loopback."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.redis_required import require_redis

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Name the capital of France."}
]
CACHE = "x-levergate-cache"


def generations(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0))


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0)


async def ask(client: openai.AsyncOpenAI, **extra: Any) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=QUESTION, max_tokens=8, temperature=0, **extra
    )


async def test_exact_hits_replay_in_either_shape(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    first = await ask(client)
    second = await ask(client)
    assert first.headers[CACHE] == "miss"
    assert second.headers[CACHE] == "hit"
    assert float(second.headers["x-levergate-cache-age"]) >= 0
    answer = first.parse().choices[0].message.content
    assert second.parse().choices[0].message.content == answer
    stream = await client.chat.completions.create(
        model="sim-small", messages=QUESTION, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == first.parse().usage.completion_tokens
    assert generations(sim) == 1


async def test_repeated_hits_answer_the_same_bytes_headers_and_counts(
    sim: SimHandle, proxy: str
) -> None:
    """The same request again and again over HTTP: the first hit decides its key once, the next
    ones reuse that and the decoded entry (layers/cache/memo.py). Every hit answers the miss's
    bytes with the same headers and is counted (a lookup, the tokens it saved); the same bytes
    from another tenant are that tenant's own miss."""
    body = json.dumps({"model": "sim-small", "messages": QUESTION, "max_tokens": 8,
                       "temperature": 0}).encode()  # fmt: skip
    sent = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=proxy) as http:
        replies = [await http.post("/chat/completions", content=body, headers=sent)
                   for _ in range(4)]  # fmt: skip
        other = await http.post("/chat/completions", content=body,
                                headers={**sent, "x-levergate-tenant": "other"})  # fmt: skip
        metrics = (await http.get(proxy.removesuffix("/v1") + "/metrics")).text
    assert [r.headers[CACHE] for r in replies] == ["miss", "hit", "hit", "hit"]
    assert all(r.status_code == 200 and r.content == replies[0].content for r in replies)
    hits = replies[1:]
    per_request = {"x-request-id", "x-levergate-cache-age", "age", "x-levergate-overhead-ms"}
    same = [{k: v for k, v in r.headers.items() if k not in per_request} for r in hits]
    assert same[0] == same[1] == same[2]
    assert same[0]["x-levergate-attempts"] == "0"
    assert {"x-levergate-cost-usd", "x-levergate-savings-usd", "age"} <= set(hits[2].headers)
    assert other.headers[CACHE] == "miss"
    assert generations(sim) == 2
    completion = json.loads(replies[0].content)["usage"]["completion_tokens"]
    assert 'levergate_cache_lookups_total{cache="exact",outcome="hit"} 3.0' in metrics
    assert (f'levergate_cache_saved_tokens_total{{cache="exact",kind="output"}} '
            f"{3.0 * completion}") in metrics  # fmt: skip


async def test_a_streamed_answer_serves_later_whole_requests(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    stream = await client.chat.completions.create(
        model="sim-small", messages=QUESTION, max_tokens=8, seed=7, stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    whole = await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=QUESTION, max_tokens=8, seed=7
    )
    assert whole.headers[CACHE] == "hit"
    assert whole.parse().choices[0].message.content == text
    assert generations(sim) == 1


async def test_identical_requests_in_flight_go_upstream_once(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"latency": {"ttft_ms": 300, "tokens_per_second": 100}})

    async def streamed() -> str:
        stream = await client.chat.completions.create(
            model="sim-small", messages=QUESTION, max_tokens=8, temperature=0, stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream])

    async def whole() -> str:
        return (await ask(client)).parse().choices[0].message.content or ""

    answers = await asyncio.gather(*(streamed() if i % 2 else whole() for i in range(8)))
    assert len(set(answers)) == 1
    assert generations(sim) == 1


async def test_cut_streams_and_errors_are_not_cached(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"faults": {"disconnect_rate": 1.0}})

    async def cut() -> None:
        stream = await client.chat.completions.create(
            model="sim-small", messages=QUESTION, max_tokens=8, temperature=0, stream=True
        )
        [c async for c in stream]

    with pytest.raises(openai.APIError):
        await cut()
    sim.configure({"faults": {"disconnect_rate": 0.0, "error_rate": 1.0}})
    with pytest.raises(openai.InternalServerError):
        await ask(client)
    sim.configure({"faults": {"error_rate": 0.0}})
    assert (await ask(client)).headers[CACHE] == "miss"
    assert (await ask(client)).headers[CACHE] == "hit"


async def test_cache_control_and_sampled_requests(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    await ask(client)
    refreshed = await ask(client, extra_headers={"Cache-Control": "no-cache"})
    assert refreshed.headers[CACHE] == "miss"
    sampled = await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=QUESTION, max_tokens=8, temperature=0.8
    )
    assert sampled.headers[CACHE] == "bypass; reason=nondeterministic"
    assert generations(sim) == 3


async def test_a_route_caches_sampled_requests_when_its_rule_says_always(
    sim: SimHandle, gateway_for: GatewayFactory
) -> None:
    """The rule is keyed by the name the client sends, so a route has its own: `auto` caches
    the SDK's usual call (no temperature), the aliases behind it keep the default."""
    settings: dict[str, Any] = {
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [{"name": "small", "upstream": "sim"}, {"name": "large", "upstream": "sim"}],
        "routing": {"routes": [{"name": "auto", "default": "large"}]},
        "cache": {"models": {"auto": {"mode": "always"}}},
    }
    async with gateway_for(**settings) as url, sdk(url) as client:
        create = client.chat.completions.with_raw_response.create
        routed = [await create(model="auto", messages=QUESTION, max_tokens=8) for _ in range(2)]
        assert [r.headers[CACHE] for r in routed] == ["miss", "hit"]
        direct = [await create(model="large", messages=QUESTION, max_tokens=8) for _ in range(2)]
        assert {r.headers[CACHE] for r in direct} == {"bypass; reason=nondeterministic"}
    assert generations(sim) == 3


async def test_embeddings_send_only_the_missing_inputs(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    first = await client.embeddings.with_raw_response.create(model="sim-embed", input=["a", "b"])
    second = await client.embeddings.with_raw_response.create(
        model="sim-embed", input=["b", "c", "b"]
    )
    assert second.headers["x-levergate-cache-hits"] == "2/3"
    one, two = first.parse(), second.parse()
    assert [e.index for e in two.data] == [0, 1, 2]
    assert two.data[0].embedding == one.data[1].embedding == two.data[2].embedding
    direct = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk", max_retries=0)
    alone = await direct.embeddings.create(model="sim-embed", input=["c"])
    assert two.data[1].embedding == alone.data[0].embedding
    await direct.close()
    again = await client.embeddings.with_raw_response.create(model="sim-embed", input="c")
    assert again.headers[CACHE] == "hit"
    assert again.parse().usage.prompt_tokens == 0


async def test_sqlite_entries_survive_a_gateway_restart(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    store = {"backend": "sqlite", "sqlite_path": str(tmp_path / "cache.sqlite3"),
             "timeout_seconds": 2.0}  # fmt: skip
    for expected in ("miss", "hit"):
        async with gateway_at(sim.base_url, cache={"store": store}) as url, sdk(url) as client:
            assert (await ask(client)).headers[CACHE] == expected
    assert generations(sim) == 1


async def test_replicas_share_entries_through_redis(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    import redis.asyncio as aioredis

    await require_redis("redis://127.0.0.1:6379/0")
    probe = aioredis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=10)
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    store = {"backend": "redis", "redis_prefix": prefix, "timeout_seconds": 1.0}
    try:
        async with (
            gateway_at(sim.base_url, cache={"store": store}) as one,
            gateway_at(sim.base_url, cache={"store": store}) as two,
            sdk(one) as first,
            sdk(two) as second,
        ):
            assert (await ask(first)).headers[CACHE] == "miss"
            assert (await ask(second)).headers[CACHE] == "hit"
        assert generations(sim) == 1
    finally:
        keys = [k async for k in probe.scan_iter(match=prefix + "*")]
        if keys:
            await probe.delete(*keys)
        await probe.aclose()


async def test_a_down_redis_still_answers_every_request(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    store = {"timeout_seconds": 0.2, "front_bytes": 0}
    dead = {"default": {"redis_url": "redis://127.0.0.1:1/0"}}
    async with (
        gateway_at(sim.base_url, cache={"store": store}, stores=dead) as url,
        sdk(url) as client,
    ):
        for _ in range(3):
            reply = await ask(client)
            assert reply.headers[CACHE] == "miss"
            assert reply.parse().choices[0].message.content
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url.removesuffix("/v1") + "/metrics")).text
    assert generations(sim) == 3
    assert (
        'levergate_cache_store_faults_total{op="get",reason="error",store="redis"} 1.0' in metrics
    )
    assert 'reason="cooling_down",store="redis"' in metrics
