"""The semantic cache end to end: simulator <- levergate <- the OpenAI SDK, on loopback. The
embedder is the deterministic bag-of-words test double (the MiniLM model is measured in
benchmarks/cache_semantic_eval.py), injected the way library users inject theirs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam
from redis.asyncio import Redis

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.simulator import SimHandle
from tests.redis_required import require_redis
from tests.unit.layers.cache.test_semantic import BagOfWords

REDIS_URL = "redis://127.0.0.1:6379/15"


@asynccontextmanager
async def semantic_gateway(
    sim: SimHandle, *, cache: dict[str, Any] | None = None, stores: dict[str, Any] | None = None
) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = Settings.for_upstream(
        sim.base_url,
        server={"port": 0},
        stores=stores or {},
        cache={"features": {"faq": {"semantic": True}}, "semantic": {"threshold": 0.8},
               **(cache or {})},
    )  # fmt: skip
    async with (
        Gateway(settings, deps=Deps(embedder=BagOfWords())) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk", max_retries=0) as client,
    ):
        yield client


async def ask(
    client: openai.AsyncOpenAI, text: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=[{"role": "user", "content": text}], max_tokens=8,
        temperature=0, extra_headers={"x-levergate-feature": "faq", **(headers or {})}, **extra,
    )  # fmt: skip


def generations(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0))


async def test_paraphrases_hit_and_near_misses_do_not(sim: SimHandle) -> None:
    async with semantic_gateway(sim) as client:
        first = await ask(client, "What is the capital of France?")
        paraphrase = await ask(client, "what's the capital of France")
        assert paraphrase.headers["x-levergate-cache"] == "semantic"
        assert float(paraphrase.headers["x-levergate-cache-similarity"]) >= 0.8
        answer = first.parse().choices[0].message.content
        assert paraphrase.parse().choices[0].message.content == answer
        await ask(client, "How do I cancel my subscription?")
        near_miss = await ask(client, "How do I change my subscription?")
        assert near_miss.headers["x-levergate-cache"] == "miss"
        again: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "whats the capital of France"}
        ]
        stream = await client.chat.completions.create(
            model="sim-small", messages=again, max_tokens=8, temperature=0, stream=True,
            extra_headers={"x-levergate-feature": "faq"},
        )  # fmt: skip
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        assert text == answer
    assert generations(sim) == 3


async def test_without_the_opt_in_nothing_is_fuzzy(sim: SimHandle) -> None:
    async with semantic_gateway(sim) as client:
        for text in ("What is the capital of France?", "what's the capital of France"):
            reply = await client.chat.completions.with_raw_response.create(
                model="sim-small", messages=[{"role": "user", "content": text}], max_tokens=8,
                temperature=0,
            )  # fmt: skip
            assert reply.headers["x-levergate-cache"] == "miss"
    assert generations(sim) == 2


async def test_replicas_sharing_redis_serve_each_others_answers(sim: SimHandle) -> None:
    await require_redis(REDIS_URL)
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    shared = {
        # The index follows the store's connection (`index: auto`).
        "store": {"redis_prefix": prefix},
        "semantic": {"threshold": 0.8},
    }
    try:
        async with AsyncExitStack() as replicas:
            redis = {"default": {"redis_url": REDIS_URL}}
            one = await replicas.enter_async_context(
                semantic_gateway(sim, cache=shared, stores=redis)
            )
            two = await replicas.enter_async_context(
                semantic_gateway(sim, cache=shared, stores=redis)
            )
            first = await ask(one, "What is the capital of France?")
            assert first.headers["x-levergate-cache"] == "miss"
            # Replica two learns of the answer from the shared log; until then it misses, and
            # `no-store` keeps those misses from storing answers of its own.
            for _ in range(500):
                before = generations(sim)
                reply = await ask(
                    two, "what's the capital of France", headers={"cache-control": "no-store"}
                )
                if reply.headers["x-levergate-cache"] == "semantic":
                    break
                await asyncio.sleep(0.01)
            assert reply.headers["x-levergate-cache"] == "semantic"
            assert generations(sim) == before
            answer = first.parse().choices[0].message.content
            assert reply.parse().choices[0].message.content == answer
    finally:
        client = Redis.from_url(REDIS_URL)
        keys = [k async for k in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
