"""Micro-batching through the proxy, with the official SDK against the simulator: concurrent
one-input `embeddings.create` calls become fewer upstream calls, and each client still gets
its own vector and its own usage; a batch the provider rejects for one bad input is re-sent one
request at a time, so only that request fails."""

from __future__ import annotations

import asyncio

import openai

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

N = 16
# The batch closes when N requests have joined, so the wait is a ceiling, not a cost.
BATCHING = {"enabled": True, "max_wait_ms": 500, "max_requests": N}


def sim_calls(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/embeddings", 0))


async def test_concurrent_one_input_requests_share_upstream_calls(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    texts = [f"sentence number {i} " + "word " * i for i in range(N)]
    async with (
        gateway_at(sim.base_url, microbatch=BATCHING) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0) as client,
    ):
        raw = await asyncio.gather(*[
            client.embeddings.with_raw_response.create(model="sim-embed", input=t) for t in texts
        ])  # fmt: skip
    batched = sim_calls(sim)
    assert batched < N
    replies = [r.parse() for r in raw]
    assert any(int(r.headers.get("x-levergate-microbatch", "1")) > 1 for r in raw)
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk", max_retries=0) as direct:
        alone = [await direct.embeddings.create(model="sim-embed", input=t) for t in texts]
    for reply, own in zip(replies, alone, strict=True):
        assert [row.index for row in reply.data] == [0]
        assert reply.data[0].embedding == own.data[0].embedding  # its own vector
    billed = sim.stats()["tokens"]["prompt"] - sum(a.usage.prompt_tokens for a in alone)
    assert sum(r.usage.prompt_tokens for r in replies) == billed  # shares add up to the bill
    longest, shortest = replies[-1].usage.prompt_tokens, replies[0].usage.prompt_tokens
    assert longest > shortest  # each pays for its own input, not an even split


async def test_one_bad_input_fails_only_its_own_request(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with (
        gateway_at(sim.base_url, microbatch={**BATCHING, "max_requests": 3}) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0) as client,
    ):
        results = await asyncio.gather(
            client.embeddings.create(model="sim-embed", input="fine", encoding_format="float"),
            client.embeddings.create(model="sim-embed", input=[[]], encoding_format="float"),
            client.embeddings.create(model="sim-embed", input="also", encoding_format="float"),
            return_exceptions=True,
        )
    good, bad, also = results
    assert isinstance(bad, openai.BadRequestError)
    assert not isinstance(good, BaseException)
    assert not isinstance(also, BaseException)
    assert len(good.data[0].embedding) == len(also.data[0].embedding) > 0


async def test_multi_input_requests_split_back_in_order(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with (
        gateway_at(sim.base_url, microbatch={**BATCHING, "max_requests": 2}) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0) as client,
    ):
        pair, one = await asyncio.gather(
            client.embeddings.create(model="sim-embed", input=["a", "b"], dimensions=8),
            client.embeddings.create(model="sim-embed", input="c", dimensions=8),
        )
    assert [r.index for r in pair.data] == [0, 1]
    assert [r.index for r in one.data] == [0]
    assert len({tuple(r.embedding) for r in (*pair.data, *one.data)}) == 3
    assert sim_calls(sim) == 1


async def test_the_layer_is_off_by_default(sim: SimHandle, gateway_at: GatewayFactory) -> None:
    async with (
        gateway_at(sim.base_url) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0) as client,
    ):
        await asyncio.gather(*[client.embeddings.create(model="sim-embed", input=str(i))
                               for i in range(4)])  # fmt: skip
    assert sim_calls(sim) == 4
