"""The proxy, end to end: simulator <- levergate <- official OpenAI SDK, all on loopback."""

from __future__ import annotations

import httpx
import openai

from levergate.simulator import SimHandle
from tests.e2e.conftest import BOTH_JSON_STYLES, USER


async def test_chat_completion_passes_through_with_gateway_headers(
    client: openai.AsyncOpenAI,
) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=USER, max_tokens=5
    )
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 5
    assert float(raw.headers["x-levergate-overhead-ms"]) >= 0
    assert raw.headers["x-request-id"]


@BOTH_JSON_STYLES
async def test_stream_arrives_chunk_by_chunk_without_the_usage_chunk_unless_asked(
    client: openai.AsyncOpenAI,
) -> None:
    stream = await client.chat.completions.create(
        model="sim-small", messages=USER, max_tokens=6, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert all(chunk.choices for chunk in chunks)
    # The everyday SDK loop: an unrequested usage chunk (choices: []) would raise IndexError.
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(text.split()) == 6
    assert chunks[-1].choices[0].finish_reason == "length"

    stream = await client.chat.completions.create(
        model="sim-small", messages=USER, max_tokens=6, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6


async def test_completions_and_embeddings(client: openai.AsyncOpenAI) -> None:
    completion = await client.completions.create(model="sim-small", prompt="Once", max_tokens=3)
    assert completion.choices[0].text
    stream = await client.completions.create(
        model="sim-small", prompt="Once", max_tokens=3, stream=True
    )
    assert "".join([c.choices[0].text async for c in stream])
    embeddings = await client.embeddings.create(model="sim-embed", input=["a", "b"])
    assert [e.index for e in embeddings.data] == [0, 1]
    assert len(embeddings.data[0].embedding) > 0


@BOTH_JSON_STYLES
async def test_models_health_and_metrics(client: openai.AsyncOpenAI, proxy: str) -> None:
    models = await client.models.list()
    assert models.data
    stream = await client.chat.completions.create(
        model="sim-small", messages=USER, max_tokens=3, stream=True,
        extra_headers={"x-levergate-feature": "e2e-feature"},
    )  # fmt: skip
    async for _ in stream:
        pass
    root = proxy.removesuffix("/v1")
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{root}/healthz")).status_code == 200
        assert (await http.get(f"{root}/readyz")).status_code == 200
        metrics = (await http.get(f"{root}/metrics")).text
    assert 'levergate_ttft_seconds_count{feature="e2e-feature"' in metrics
    assert "levergate_overhead_seconds_bucket" in metrics
    assert 'kind="output"' in metrics
    # The stream's usage was read whatever the upstream's JSON spacing: 3 output tokens.
    (output,) = [
        line for line in metrics.splitlines()
        if line.startswith("levergate_tokens_total") and 'kind="output"' in line
    ]  # fmt: skip
    assert float(output.rsplit(" ", 1)[1]) == 3
    assert "levergate_inter_token_seconds_count{" in metrics


async def test_client_disconnect_cancels_the_upstream_stream(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"latency": {"tokens_per_second": 20}})
    stream = await client.chat.completions.create(
        model="sim-small", messages=USER, max_tokens=2000, stream=True
    )
    async for _ in stream:
        break
    assert sim.stats()["in_flight"] == 1
    await stream.close()
    for _ in range(200):
        if sim.stats()["in_flight"] == 0:
            break
        await _tick()
    assert sim.stats()["in_flight"] == 0


async def _tick() -> None:
    import asyncio

    await asyncio.sleep(0.02)


async def test_client_giving_up_on_a_non_streaming_call_cancels_it_upstream(
    sim: SimHandle, proxy: str
) -> None:
    sim.configure({"latency": {"ttft_ms": 30_000}})
    async with httpx.AsyncClient(timeout=0.5) as http:
        try:
            await http.post(
                f"{proxy}/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            )
        except httpx.ReadTimeout:
            pass
        else:
            raise AssertionError("the simulator answered despite a 30 s TTFT")
    for _ in range(200):
        if sim.stats()["in_flight"] == 0:
            break
        await _tick()
    assert sim.stats()["in_flight"] == 0
