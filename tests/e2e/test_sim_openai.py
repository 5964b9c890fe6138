"""The simulator driven by the official OpenAI SDK over loopback, in-process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionSystemMessageParam

from levergate.simulator import SimHandle, SimSettings, run_simulator

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something simulated."}]


@pytest.fixture
async def simulator() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings()) as handle:
        yield handle


@pytest.fixture
async def sdk(simulator: SimHandle) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=simulator.base_url, api_key="sk-e2e", max_retries=0, timeout=10
    ) as client:
        yield client


async def test_chat_completion(sdk: openai.AsyncOpenAI, simulator: SimHandle) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model="sim-small", messages=USER)
    assert raw.headers["x-simulated"] == "levergate-sim"
    completion = raw.parse()
    assert completion.system_fingerprint == "levergate-sim"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 16
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    again = await sdk.chat.completions.create(model="sim-small", messages=USER)
    assert again.choices[0].message.content == completion.choices[0].message.content
    assert simulator.stats()["requests_by_key"] == {"sk-e2e": 2}


async def test_chat_stream_with_usage(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="sim-small", messages=USER, max_tokens=5, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [t for c in chunks[1:-2] if (t := c.choices[0].delta.content) is not None]
    assert len(content) == 5
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    whole = await sdk.chat.completions.create(model="sim-small", messages=USER, max_tokens=5)
    assert "".join(content) == whole.choices[0].message.content


async def test_completions_stream_and_not(sdk: openai.AsyncOpenAI) -> None:
    completion = await sdk.completions.create(model="sim-small", prompt="Once", max_tokens=4)
    assert completion.object == "text_completion"
    assert completion.choices[0].finish_reason == "length"
    stream = await sdk.completions.create(
        model="sim-small", prompt="Once", max_tokens=4, stream=True
    )
    text = "".join([chunk.choices[0].text async for chunk in stream])
    assert text == completion.choices[0].text


async def test_embeddings(sdk: openai.AsyncOpenAI, simulator: SimHandle) -> None:
    simulator.configure({"embedding_dim": 16})
    result = await sdk.embeddings.create(model="sim-embed", input=["alpha", "beta", "alpha"])
    vectors = [item.embedding for item in result.data]
    assert [len(v) for v in vectors] == [16, 16, 16]
    assert vectors[0] == vectors[2] != vectors[1]
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-6
    assert result.usage.prompt_tokens == 5  # 2 + 1 + 2: a token per started 4 characters
    single = await sdk.embeddings.create(model="sim-embed", input="alpha", dimensions=8)
    assert len(single.data[0].embedding) == 8
    floats = await sdk.embeddings.create(model="sim-embed", input="alpha", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(vectors[0], rel=1e-6)


async def test_models(sdk: openai.AsyncOpenAI) -> None:
    models = [model.id async for model in sdk.models.list()]
    assert "sim-small" in models


async def test_rate_limit_429_with_openai_headers(
    sdk: openai.AsyncOpenAI, simulator: SimHandle
) -> None:
    simulator.configure({"limits": {"rpm": 2, "tpm": 10_000}})
    ok = await sdk.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert ok.headers["x-ratelimit-limit-requests"] == "2"
    assert ok.headers["x-ratelimit-remaining-requests"] == "1"
    assert ok.headers["x-ratelimit-limit-tokens"] == "10000"
    await sdk.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.RateLimitError) as caught:
        await sdk.chat.completions.create(model="m", messages=USER)
    headers = caught.value.response.headers
    assert int(headers["retry-after"]) >= 59
    assert int(headers["retry-after-ms"]) > 59_000
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    assert caught.value.code == "rate_limit_exceeded"
    assert simulator.stats()["rate_limited"] == 1


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("500", openai.InternalServerError),
        ("503", openai.InternalServerError),
        ("429", openai.RateLimitError),
    ],
)
async def test_forced_error_statuses(
    sdk: openai.AsyncOpenAI, simulator: SimHandle, fault: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await sdk.chat.completions.create(
            model="m", messages=USER, extra_headers={"x-sim-fault": fault}
        )
    assert simulator.stats()["faults_injected"] == {fault: 1}


async def test_malformed_body_breaks_the_sdk(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="m", messages=USER, extra_headers={"x-sim-fault": "malformed"}
    )
    assert raw.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        raw.parse()


async def test_hang_times_out_and_is_released(simulator: SimHandle) -> None:
    async with openai.AsyncOpenAI(
        base_url=simulator.base_url, api_key="k", max_retries=0, timeout=0.3
    ) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model="m", messages=USER, extra_headers={"x-sim-fault": "hang"}
            )
    for _ in range(100):
        if simulator.stats()["in_flight"] == 0:
            break
        await _tick()
    assert simulator.stats()["in_flight"] == 0


async def test_disconnect_cuts_the_stream(sdk: openai.AsyncOpenAI, simulator: SimHandle) -> None:
    simulator.configure({"faults": {"disconnect_after_chunks": 3}})
    stream = await sdk.chat.completions.create(
        model="m", messages=USER, stream=True, extra_headers={"x-sim-fault": "disconnect"}
    )
    received: list[object] = []

    async def read_all() -> None:
        async for chunk in stream:
            received.append(chunk)  # noqa: PERF401 - what arrived before the cut is the point

    with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
        await read_all()
    assert len(received) == 3


async def test_disconnect_cuts_a_plain_body(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.APIConnectionError):
        await sdk.chat.completions.create(
            model="m", messages=USER, extra_headers={"x-sim-fault": "disconnect"}
        )


async def test_configured_error_rate_applies_mid_test(
    sdk: openai.AsyncOpenAI, simulator: SimHandle
) -> None:
    await sdk.chat.completions.create(model="m", messages=USER)
    simulator.configure({"faults": {"error_rate": 1.0}})
    with pytest.raises(openai.InternalServerError):
        await sdk.chat.completions.create(model="m", messages=USER)
    simulator.configure({"faults": {"error_rate": 0.0}})
    await sdk.chat.completions.create(model="m", messages=USER)
    assert simulator.stats()["faults_total"] == 1


async def test_prompt_cache_hit_on_a_repeated_long_prefix(
    sdk: openai.AsyncOpenAI, simulator: SimHandle
) -> None:
    system: ChatCompletionSystemMessageParam = {
        "role": "system",
        "content": "You are a careful assistant. " * 200,
    }  # ~1450 tokens
    first = await sdk.chat.completions.create(model="m", messages=[system, *USER])
    second = await sdk.chat.completions.create(
        model="m", messages=[system, {"role": "user", "content": "Something else entirely."}]
    )
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None
    assert cached >= 1024
    assert cached % 128 == 0
    assert cached <= second.usage.prompt_tokens
    assert simulator.stats()["prompt_cache"]["hits"] == 1


async def test_control_endpoints_over_http(simulator: SimHandle) -> None:
    async with httpx.AsyncClient(base_url=simulator.root_url) as http:
        patched = await http.post("/sim/config", json={"latency": {"jitter": 0.1}})
        assert patched.status_code == 200
        assert patched.json()["latency"]["jitter"] == 0.1
        assert simulator.settings.latency.jitter == 0.1
        stats = (await http.get("/sim/stats")).json()
        assert stats["requests_by_endpoint"]["/sim/config"] == 1
        assert (await http.post("/sim/reset")).json() == {"reset": True}
        assert (await http.get("/sim/stats")).json()["requests_total"] == 1
        missing = await http.get("/v2/whatever")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "invalid_request_error"
        wrong = await http.delete("/v1/chat/completions")
        assert wrong.status_code == 405
        bad = await http.post("/v1/chat/completions", content=b"{nope")
        assert bad.status_code == 400
        assert bad.headers["x-simulated"] == "levergate-sim"


async def test_latency_settings_are_applied(sdk: openai.AsyncOpenAI, simulator: SimHandle) -> None:
    simulator.configure({"latency": {"ttft_ms": 20, "tokens_per_second": 500}})
    stream = await sdk.chat.completions.create(model="m", messages=USER, max_tokens=4, stream=True)
    assert len([chunk async for chunk in stream]) == 6
    assert simulator.stats()["in_flight"] == 0


async def _tick() -> None:
    await asyncio.sleep(0.01)


async def test_concurrency_limit_and_max_in_flight(
    sdk: openai.AsyncOpenAI, simulator: SimHandle
) -> None:
    simulator.configure({"latency": {"ttft_ms": 300}, "limits": {"max_concurrency": 1}})
    results = await asyncio.gather(
        sdk.chat.completions.create(model="m", messages=USER),
        sdk.chat.completions.create(model="m", messages=USER),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(refused) == 1
    assert refused[0].code == "concurrency_limit_exceeded"
    stats = simulator.stats()
    assert stats["max_in_flight"] == 1
    assert stats["in_flight"] == 0
