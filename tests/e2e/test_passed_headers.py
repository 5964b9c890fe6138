"""The provider's allow-listed response headers reach the client through the proxy: its rate
limits on plain answers, streams and 429s; nothing else of the provider's does."""

from __future__ import annotations

import openai
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import USER


async def test_rate_limit_headers_pass_through_on_answers_and_streams(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"limits": {"rpm": 100, "tpm": 100_000}})
    raw = await client.chat.completions.with_raw_response.create(
        model="m", messages=USER, max_tokens=2
    )
    assert raw.headers["x-ratelimit-limit-requests"] == "100"
    assert raw.headers["x-ratelimit-remaining-requests"] == "99"
    assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
    assert "x-simulated" not in raw.headers  # not on the allow-list
    async with client.chat.completions.with_streaming_response.create(
        model="m", messages=USER, max_tokens=2, stream=True
    ) as streamed:
        assert streamed.headers["x-ratelimit-remaining-requests"] == "98"
        assert [line async for line in streamed.iter_lines() if line][-1] == "data: [DONE]"


async def test_a_passed_through_429_keeps_the_providers_rate_limit_headers(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    sim.configure({"limits": {"rpm": 1}})
    await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
    headers = caught.value.response.headers
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"]
