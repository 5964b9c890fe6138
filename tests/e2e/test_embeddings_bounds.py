"""Embeddings answers bounded by what the client sent (issue 20, item 6), through a real gateway
in front of the simulator (1,536 dimensions), the official OpenAI SDK as the client.

2,048 copies of "a" (10 KB in, one input upstream) made a 66.7 MB answer: now a 400 naming the
bound before anything goes upstream. A large answer the cache puts together is sent in chunks
from the cached vectors' own bytes: the SDK reads exactly what the upstream's answer held."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

MODEL = "text-embedding-3-small"


def embedding_calls(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/embeddings", 0))


async def test_copies_past_the_bound_are_a_400_before_the_upstream(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with (
        gateway_at(sim.base_url) as url,
        openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client,
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.embeddings.create(model=MODEL, input=["a"] * 2048)
        assert refused.value.code == "too_many_copies"
        assert "at most 16 inputs per distinct input" in refused.value.message
        assert embedding_calls(sim) == 0
        ok = await client.embeddings.create(model=MODEL, input=["a"] * 16 + ["b"])
        assert len(ok.data) == 17
        assert ok.data[0].embedding == ok.data[15].embedding


async def test_a_large_answer_from_the_cache_is_the_upstreams_answer_byte_for_byte(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    texts = [f"text number {i}" for i in range(300)]  # ~10 MB of vectors: sent in chunks
    async with gateway_at(sim.base_url) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            body = {"model": MODEL, "input": texts, "encoding_format": "float"}
            first = await http.post("/embeddings", json=body)  # a miss: the upstream's bytes
            again = await http.post("/embeddings", json=body)  # a hit: assembled from parts
            assert again.headers["x-levergate-cache"] == "hit"
            assert int(again.headers["content-length"]) == len(again.content)
            assert orjson.loads(again.content)["data"] == orjson.loads(first.content)["data"]
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            mixed = texts[::2] + [f"new text {i}" for i in range(150)]  # half cached
            got = await client.embeddings.create(model=MODEL, input=mixed,
                                                 encoding_format="float")  # fmt: skip
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as direct:
        want = await direct.embeddings.create(model=MODEL, input=mixed, encoding_format="float")
    assert [row.embedding for row in got.data] == [row.embedding for row in want.data]
    assert [row.index for row in got.data] == list(range(300))
