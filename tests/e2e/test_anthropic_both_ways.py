"""Anthropic on both sides: the official `anthropic` SDK -> levergate's /v1/messages -> a
`kind: anthropic` upstream (the simulator speaking Messages). The request crosses the pipeline
as an OpenAI-shaped call and comes back out in Anthropic's wire format, so what the client
sent (system, cache_control, stop sequences, tools) must reach the provider, and what the
provider answered (text, usage with its cache buckets, stop reason) must reach the client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator
from tests.e2e.test_anthropic_upstream import KEY, anthropic_requests

SYSTEM = "You answer questions about the handbook, briefly and exactly. " * 120  # >1,024 tokens


@pytest.fixture
async def claude_sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@pytest.fixture
async def client(claude_sim: SimHandle) -> AsyncIterator[anthropic.AsyncAnthropic]:
    settings = Settings.load(
        server={"port": 0},
        upstreams=[
            {
                "kind": "anthropic",
                "name": "anthropic",
                "base_url": claude_sim.root_url,
                "api_key": KEY,
            }
        ],
        models=[{"name": "claude", "upstream": "anthropic", "upstream_model": "claude-sim-4"}],
        prompt_cache={"breakpoints": {"enabled": False}},  # only the client's breakpoints
    )
    async with Gateway(settings) as gateway, serving(gateway) as url:
        root = url.removesuffix("/v1")
        async with anthropic.AsyncAnthropic(base_url=root, api_key="unused", max_retries=0) as c:
            yield c


async def test_a_client_breakpoint_reaches_the_provider_and_its_cache_usage_comes_back(
    client: anthropic.AsyncAnthropic, claude_sim: SimHandle
) -> None:
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    answers = [
        await client.messages.create(
            model="claude",
            max_tokens=16,
            system=system,
            stop_sequences=["\n\n"],
            messages=[{"role": "user", "content": f"Question {i}?"}],
        )
        for i in range(2)
    ]
    assert anthropic_requests(claude_sim) == 2
    first, second = (a.usage for a in answers)
    # The provider wrote the breakpoint's prefix on the first call and read it on the second:
    # proof the cache_control the client set crossed the OpenAI-shaped pipeline intact.
    assert (first.cache_creation_input_tokens or 0) > 1000
    assert (second.cache_read_input_tokens or 0) == first.cache_creation_input_tokens
    # Anthropic's convention on the way out: input_tokens excludes both cache buckets.
    assert second.input_tokens < 100
    assert all(a.content and a.content[0].type == "text" for a in answers)
    assert all(a.stop_reason in ("end_turn", "max_tokens", "stop_sequence") for a in answers)


async def test_a_stream_comes_back_as_anthropic_events(client: anthropic.AsyncAnthropic) -> None:
    async with client.messages.stream(
        model="claude", max_tokens=24, messages=[{"role": "user", "content": "Say hello."}]
    ) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text
    assert final.content[0].type == "text"
    assert final.content[0].text == text
    assert final.usage.output_tokens > 0
