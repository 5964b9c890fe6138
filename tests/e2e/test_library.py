"""The library: `Gateway` in-process, and the OpenAI SDK over `GatewayTransport(gw)` — the same
pipeline as the proxy, with no socket between the client and the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from levergate import Gateway, LevergateError, Settings
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle
from tests.e2e.conftest import BOTH_JSON_STYLES, USER

# `Gateway.chat` takes plain JSON dicts, not the SDK's message TypedDicts.
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Say something simulated."}]


@pytest.fixture
async def gateway(sim: SimHandle) -> AsyncIterator[Gateway]:
    async with Gateway(Settings.for_upstream(sim.base_url)) as gw:
        yield gw


@BOTH_JSON_STYLES
async def test_chat_in_process_streaming_and_not(gateway: Gateway) -> None:
    reply = await gateway.chat(model="m", messages=MESSAGES, max_tokens=4)
    assert isinstance(reply, dict)
    assert reply["usage"]["completion_tokens"] == 4
    stream = await gateway.chat(model="m", messages=MESSAGES, max_tokens=4, stream=True)
    assert not isinstance(stream, dict)
    chunks = [chunk async for chunk in stream]
    assert all(chunk["choices"] for chunk in chunks)  # no usage chunk unless asked
    embedded = await gateway.embed(model="e", input="hello")
    assert embedded["data"][0]["embedding"]


async def test_library_errors_are_the_same_exception_tree(gateway: Gateway) -> None:
    with pytest.raises(LevergateError) as caught:
        await gateway.chat(model="m", messages=[])
    assert caught.value.http_status == 400


@BOTH_JSON_STYLES
async def test_the_sdk_over_the_in_process_transport(gateway: Gateway, sim: SimHandle) -> None:
    async with openai.AsyncOpenAI(
        base_url="http://levergate.local/v1",
        api_key="unused",
        max_retries=0,
        # The SDK takes httpx clients too; its type hint names only httpx2's.
        http_client=httpx.AsyncClient(transport=GatewayTransport(gateway)),  # type: ignore[arg-type]
    ) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="m", messages=USER, max_tokens=3
        )
        assert raw.parse().choices[0].message.content
        assert "x-levergate-overhead-ms" in raw.headers
        plain = await sdk.chat.completions.create(
            model="m", messages=USER, max_tokens=3, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in plain])
        assert len(text.split()) == 3
        stream = await sdk.chat.completions.create(
            model="m", messages=USER, max_tokens=3, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [c async for c in stream]
        assert chunks[-1].usage is not None
        with pytest.raises(openai.BadRequestError):
            await sdk.chat.completions.create(model="m", messages="nope")  # type: ignore[arg-type]
        sim.configure({"faults": {"error_rate": 1.0}})
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(model="m", messages=USER)
        assert caught.value.status_code == 502


async def test_closing_an_sdk_stream_over_the_transport_closes_the_upstream(
    gateway: Gateway, sim: SimHandle
) -> None:
    sim.configure({"latency": {"tokens_per_second": 20}})
    async with openai.AsyncOpenAI(
        base_url="http://levergate.local/v1", api_key="unused", max_retries=0,
        # The SDK takes httpx clients too; its type hint names only httpx2's.
        http_client=httpx.AsyncClient(transport=GatewayTransport(gateway)),  # type: ignore[arg-type]
    ) as sdk:  # fmt: skip
        stream = await sdk.chat.completions.create(
            model="m", messages=USER, max_tokens=1000, stream=True
        )
        async for _ in stream:
            break
        await stream.close()
    import asyncio

    for _ in range(200):
        if sim.stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.02)
    assert sim.stats()["in_flight"] == 0


def test_the_public_surface_is_pinned() -> None:
    import levergate

    assert sorted(levergate.__all__) == [
        "CachePolicy", "Call", "Clock", "Completed", "Context", "Controls", "Deps", "Event",
        "Gateway", "Layer", "LevergateError", "Principal", "Priority", "Reply", "RequestRecord",
        "Service", "Settings", "Sink", "Stream", "SystemClock", "Trace", "build_pipeline", "stack",
    ]  # fmt: skip


async def test_a_sink_given_in_deps_gets_each_finished_request_priced_at_the_model_that_answered(
    sim: SimHandle,
) -> None:
    import asyncio

    from levergate import Deps, RequestRecord

    class Collect:
        def __init__(self) -> None:
            self.records: list[RequestRecord] = []

        def emit(self, record: RequestRecord) -> None:
            self.records.append(record)

    collect = Collect()
    settings = Settings.load(
        upstreams=[{"name": "sim", "base_url": sim.base_url}],
        models=[
            {"name": "cheap", "upstream": "sim", "upstream_model": "sim-small",
             "price": {"input": 1.0, "output": 2.0}},
            {"name": "*", "upstream": "sim", "price": {"input": 100.0, "output": 100.0}},
        ],
    )  # fmt: skip
    async with Gateway(settings, deps=Deps(sinks=[collect])) as gateway:
        await gateway.chat(model="cheap", messages=USER, max_tokens=4)
        for _ in range(5):  # the record leaves after the answer, on a later loop turn
            await asyncio.sleep(0)
    [record] = collect.records
    assert (record.model, record.alias, record.upstream, record.outcome) == (
        "cheap",
        "cheap",
        "sim",
        "ok",
    )
    tokens = record.tokens
    assert tokens.output > 0
    assert record.cost_usd == pytest.approx((tokens.input * 1.0 + tokens.output * 2.0) / 1e6)


async def test_background_jobs_run_for_the_gateway_lifetime_and_stop_with_it(
    sim: SimHandle,
) -> None:
    import asyncio

    from levergate.core.jobs import BackgroundJob

    started, stopped = asyncio.Event(), asyncio.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    gateway = Gateway(Settings.for_upstream(sim.base_url))
    gateway.pipeline.background.append(BackgroundJob("test", job))
    async with gateway:
        await asyncio.wait_for(started.wait(), 5)
        assert not stopped.is_set()
    assert stopped.is_set()
