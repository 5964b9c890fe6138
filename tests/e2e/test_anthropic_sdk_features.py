"""The anthropic SDK's own features through levergate, as a user of anthropic 2.x meets them:
the request id it reads, `messages.parse` (structured outputs in `output_config`), a top-level
`cache_control` and fast mode, count_tokens answered by an Anthropic upstream itself, the
synchronous client in-process, and `thinking` on the embedded engine. The simulator stands for
the providers (OpenAI-compatible, and `kind: anthropic`); the local engine is the real one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pydantic
import pytest

from levergate import Gateway, Settings
from levergate.server.httpx2_transport import Httpx2Transport, SyncHttpx2Transport
from levergate.simulator import SimHandle, SimSettings, run_simulator
from levergate.testing.ports import free_port
from tests.e2e.test_anthropic_sdk import HI, MODES, claude, sim_settings

KEY = "sk-ant-sim-0123456789"
SYSTEM = "You answer questions about the handbook, briefly and exactly. " * 120  # >1,024 tokens


class City(pydantic.BaseModel):
    name: str
    population: int


@pytest.fixture
async def claude_sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


def on_anthropic(base_url: str, **values: Any) -> Settings:
    """Model `claude` on a `kind: anthropic` upstream at `base_url`."""
    return Settings.load(
        server={"port": 0},
        upstreams=[{"kind": "anthropic", "name": "anthropic", "base_url": base_url,
                    "api_key": KEY, "timeouts": {"connect": 2, "total": 5}}],
        models=[{"name": "claude", "upstream": "anthropic", "upstream_model": "claude-sim-4"}],
        prompt_cache={"breakpoints": {"enabled": False}},  # only the client's breakpoints
        **values,
    )  # fmt: skip


@MODES
async def test_the_request_id_reaches_the_sdk(sim: SimHandle, mode: str) -> None:
    async with claude(sim_settings(sim), mode) as sdk:
        raw = await sdk.messages.with_raw_response.create(model="sim-small", max_tokens=4,
                                                          messages=HI)  # fmt: skip
        message = await raw.parse()
        async with sdk.messages.stream(model="sim-small", max_tokens=4, messages=HI) as stream:
            streamed = stream.request_id
        video: Any = [{"role": "user", "content": [{"type": "video", "url": "x"}]}]
        with pytest.raises(anthropic.BadRequestError) as bad:
            await sdk.messages.create(model="sim-small", max_tokens=4, messages=video)
    assert message._request_id == raw.headers["x-request-id"]
    assert streamed
    assert bad.value.request_id == bad.value.response.headers["x-request-id"]


@MODES
async def test_messages_parse_through_an_openai_compatible_upstream(
    sim: SimHandle, mode: str
) -> None:
    """`output_config.format` becomes OpenAI's json_schema `response_format`, which the
    simulator answers with JSON that fits it: the SDK parses it into the model."""
    async with claude(sim_settings(sim), mode) as sdk:
        parsed = await sdk.messages.parse(
            model="sim-small", max_tokens=64, messages=HI, output_format=City
        )
        assert isinstance(parsed.parsed_output, City)
        fast: Any = {"speed": "fast"}
        with pytest.raises(anthropic.BadRequestError) as refused:
            await sdk.messages.create(model="sim-small", max_tokens=4, messages=HI, **fast)
    assert "speed" in refused.value.message  # fast mode: only an Anthropic upstream has it


async def test_structured_output_a_top_level_breakpoint_and_fast_mode_reach_anthropic(
    claude_sim: SimHandle,
) -> None:
    gateway = Gateway(on_anthropic(claude_sim.root_url))
    http = httpx2.AsyncClient(transport=Httpx2Transport(gateway))
    async with (
        gateway,
        anthropic.AsyncAnthropic(base_url="http://levergate.local", api_key="unused",
                                 max_retries=0, http_client=http) as sdk,
    ):  # fmt: skip
        parsed = await sdk.messages.parse(
            model="claude", max_tokens=64, messages=HI, output_format=City, speed="fast"
        )
        answers = [
            await sdk.messages.create(
                model="claude",
                max_tokens=8,
                system=SYSTEM,
                cache_control={"type": "ephemeral"},
                messages=[{"role": "user", "content": "Question?"}],
            )
            for _ in range(2)  # not deterministic (no temperature 0): no exact-cache hit
        ]
    assert isinstance(parsed.parsed_output, City)
    first, second = (a.usage for a in answers)
    # The provider cached the prefix the top-level breakpoint marked, then read it.
    assert (first.cache_creation_input_tokens or 0) > 1000
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens


async def test_count_tokens_is_the_anthropic_upstreams_own_count(claude_sim: SimHandle) -> None:
    question: Any = [{"role": "user", "content": "How many tokens is this?"}]
    async with claude(on_anthropic(claude_sim.root_url), "in_process") as sdk:
        raw = await sdk.messages.with_raw_response.count_tokens(
            model="claude", system=SYSTEM, messages=question
        )
    counted = await raw.parse()
    assert raw.headers["x-levergate-token-count"] == "reported"
    assert counted._request_id == raw.headers["x-request-id"]
    # The simulator's own figure (its token model), not levergate's estimate.
    assert claude_sim.stats()["requests_by_endpoint"].get("/v1/messages/count_tokens") == 1
    async with claude(on_anthropic(f"http://127.0.0.1:{free_port()}"), "in_process") as sdk:
        fallback = await sdk.messages.with_raw_response.count_tokens(
            model="claude", system=SYSTEM, messages=question
        )
    # Nobody listens there: the local estimate answers, flagged as one.
    assert fallback.headers["x-levergate-token-count"] == "estimated"
    assert (await fallback.parse()).input_tokens > 0
    assert counted.input_tokens != (await fallback.parse()).input_tokens


def sync_claude(gateway: Gateway) -> tuple[str, str, str | None]:
    """The synchronous SDK over `sync_httpx2_transport`: a message, a stream, an error."""
    with (
        httpx2.Client(transport=SyncHttpx2Transport(gateway)) as http,
        anthropic.Anthropic(base_url="http://levergate.local", api_key="unused",
                            max_retries=0, http_client=http) as sdk,
    ):  # fmt: skip
        message = sdk.messages.create(model="sim-small", max_tokens=6, messages=HI)
        with sdk.messages.stream(model="sim-small", max_tokens=6, messages=HI) as stream:
            streamed = "".join(stream.text_stream)
        try:
            sdk.messages.create(model="sim-small", max_tokens=0, messages=HI)
        except anthropic.BadRequestError as exc:
            refused = exc.request_id
        else:
            refused = None
    block = message.content[0]
    return (block.text if block.type == "text" else ""), streamed, refused


async def test_the_sync_anthropic_client_in_process(sim: SimHandle) -> None:
    gateway = Gateway(Settings.for_upstream(sim.base_url))  # started by the transport
    # In a worker thread, so this test's loop keeps serving the simulator meanwhile.
    text, streamed, refused = await asyncio.to_thread(sync_claude, gateway)
    assert text
    assert streamed == text
    assert refused  # the SDK's error class, with levergate's request id
    assert not gateway.ready  # closing the client closed the gateway


async def test_thinking_on_the_embedded_engine_is_a_400_naming_it(tmp_path: Path) -> None:
    local = {"kind": "local", "requantize": "off", "n_ctx": 512, "slots": 1, "threads": 1,
             "cache_dir": str(tmp_path)}  # fmt: skip
    settings = Settings.load(upstreams=[local], models=[{"name": "*", "upstream": "local"}])
    async with claude(settings, "in_process") as sdk:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await sdk.messages.create(
                model="smollm2", max_tokens=4, messages=HI,
                thinking={"type": "enabled", "budget_tokens": 1024},
            )  # fmt: skip
        sampled = await sdk.messages.create(
            model="smollm2", max_tokens=4, messages=HI, extra_body={"temperature": 1, "top_k": 5}
        )
    assert "thinking" in refused.value.message
    assert sampled.content
