"""Shared by the local engine tests: one real engine on the bundled model, and ways to drive it
with `Call`s or raw engine requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from levergate.config import LocalUpstreamSettings, PrefixCacheSettings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Stream
from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.endpoint import Run
from levergate.upstreams.local.sampling import SamplingParams
from levergate.upstreams.local.sequence import Draft, Finished, Request, Tokens

# A system prompt long enough (~300 tokens) for prefix reuse to matter.
SYSTEM = (
    "You are a meticulous assistant for a small bakery called The Rolling Pin. "
    "The bakery opens at seven in the morning and closes at six in the evening, every day "
    "except Monday. It sells sourdough loaves, rye bread, croissants, cinnamon rolls, "
    "baguettes, lemon tarts and three kinds of cookies: chocolate chip, oatmeal raisin and "
    "peanut butter. Prices: sourdough 6 dollars, rye 5 dollars, croissant 3 dollars, cinnamon "
    "roll 4 dollars, baguette 4 dollars, lemon tart 5 dollars, cookies 2 dollars each. "
) * 3


def local_settings(**values: Any) -> LocalUpstreamSettings:
    """Small and quick to start: the bundled Q4_1 file as is, a 4k context, 4 slots."""
    defaults: dict[str, Any] = {
        "requantize": "off",
        "n_ctx": 4096,
        "slots": 4,
        "batch_tokens": 256,
        "threads": 1,
        "prefix_cache": PrefixCacheSettings(min_tokens=16),
    }
    return LocalUpstreamSettings(**{**defaults, **values})


def running(settings: LocalUpstreamSettings) -> Iterator[LocalEndpoint]:
    """A generator for fixtures: the endpoint, stopped afterwards (its threads need no loop)."""
    endpoint = LocalEndpoint(settings)
    try:
        yield endpoint
    finally:
        endpoint.engine.stop()
        if endpoint.embedder is not None:
            endpoint.embedder.close()


def chat_call(content: str, *, system: str | None = None, headers: dict[str, str] | None = None,
              **body: Any) -> Call:  # fmt: skip
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    payload = {"model": "smollm2", "messages": messages, "temperature": 0, **body}
    return Call(kind="chat", body=payload, ctx=Context(request_id="t", headers=headers or {}))


async def answer(endpoint: LocalEndpoint, call: Call) -> dict[str, Any]:
    reply = await endpoint(call)
    assert isinstance(reply, Completed)
    return reply.data


async def streamed(endpoint: LocalEndpoint, call: Call) -> list[dict[str, Any]]:
    reply = await endpoint(call.with_body(stream=True))
    assert isinstance(reply, Stream)
    try:
        return [event.json() async for event in reply]
    finally:
        await reply.aclose()


async def generate(
    endpoint: LocalEndpoint, prompt: str, *, max_tokens: int, draft: Draft | None = None
) -> tuple[list[int], Finished]:
    """Token ids of a greedy answer straight from the engine, and its final item."""
    request = Request(
        prompt=tuple(await asyncio.to_thread(endpoint.runtime.tokenize, prompt)),
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=0.0),
        draft=draft,
    )
    run = Run(endpoint.engine, request, Context(request_id="g").trace)
    ids: list[int] = []
    while True:
        item = await run.next()
        if isinstance(item, Tokens):
            ids.extend(item.ids)
        else:
            return ids, item
