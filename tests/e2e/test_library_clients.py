"""The in-process transports as real clients use them: the client's timeout holds as it does
over a socket, and synchronous code (`openai.OpenAI`) has a transport of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from levergate import Gateway, Settings
from levergate.server.sync_transport import SyncGatewayTransport
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle
from tests.e2e.conftest import BOTH_JSON_STYLES, USER


@pytest.fixture
async def gateway(sim: SimHandle) -> AsyncIterator[Gateway]:
    async with Gateway(Settings.for_upstream(sim.base_url)) as gw:
        yield gw


def sdk(gateway: Gateway, *, timeout: float) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://levergate.local/v1", api_key="unused", max_retries=0, timeout=timeout,
        # The SDK takes httpx clients too; its type hint names only httpx2's.
        http_client=httpx.AsyncClient(transport=GatewayTransport(gateway)),  # type: ignore[arg-type]
    )  # fmt: skip


async def settled(sim: SimHandle) -> int:
    """Requests the simulator still has in flight once the cancelled ones have been closed."""
    for _ in range(250):
        if sim.stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.02)
    return int(sim.stats()["in_flight"])


async def test_the_clients_timeout_bounds_a_slow_answer_in_process(
    gateway: Gateway, sim: SimHandle
) -> None:
    sim.configure({"latency": {"ttft_ms": 3000}})
    async with sdk(gateway, timeout=0.5) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
    assert await settled(sim) == 0  # the upstream call was cancelled, not left running


async def test_the_clients_read_timeout_bounds_each_frame_of_a_stream_in_process(
    gateway: Gateway, sim: SimHandle
) -> None:
    sim.configure({"latency": {"tokens_per_second": 1}})
    async with sdk(gateway, timeout=0.4) as client:
        stream = await client.chat.completions.create(
            model="m", messages=USER, max_tokens=50, stream=True
        )
        with pytest.raises((httpx.ReadTimeout, openai.APITimeoutError)):
            async for _ in stream:
                pass
        await stream.close()
    assert await settled(sim) == 0


async def test_a_generous_timeout_changes_nothing(gateway: Gateway) -> None:
    async with sdk(gateway, timeout=30) as client:
        stream = await client.chat.completions.create(
            model="m", messages=USER, max_tokens=4, stream=True
        )
        assert len([c async for c in stream]) == 6  # role, 4 tokens, finish


def sync_calls(gateway: Gateway) -> tuple[str, str]:
    """The official synchronous SDK over `SyncGatewayTransport(gw)`: a plain call and a stream."""
    with (
        httpx.Client(transport=SyncGatewayTransport(gateway)) as http,
        openai.OpenAI(
            base_url="http://levergate.local/v1", api_key="unused", max_retries=0,
            # The SDK takes httpx clients too; its type hint names only httpx2's.
            http_client=http,  # type: ignore[arg-type]
        ) as client,
    ):  # fmt: skip
        whole = client.chat.completions.create(model="m", messages=USER, max_tokens=4)
        stream = client.chat.completions.create(model="m", messages=USER, max_tokens=4, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[])
        return whole.choices[0].message.content or "", text


@BOTH_JSON_STYLES
async def test_the_sync_sdk_over_the_sync_transport(sim: SimHandle) -> None:
    # Not started here: the transport starts the gateway on its own loop and closes it.
    gateway = Gateway(Settings.for_upstream(sim.base_url))
    # In a worker thread, so this test's loop keeps serving the simulator meanwhile.
    whole, streamed = await asyncio.to_thread(sync_calls, gateway)
    assert whole
    assert streamed == whole
    assert not gateway.ready  # closing the client closed the gateway


async def test_a_started_gateway_is_refused_by_the_sync_transport(gateway: Gateway) -> None:
    with pytest.raises(RuntimeError, match="already started"):
        SyncGatewayTransport(gateway)


def sync_call_with_timeout(gateway: Gateway, *, timeout: float) -> None:
    with (
        httpx.Client(transport=SyncGatewayTransport(gateway)) as http,
        openai.OpenAI(
            base_url="http://levergate.local/v1", api_key="unused", max_retries=0,
            # The SDK takes httpx clients too; its type hint names only httpx2's.
            timeout=timeout, http_client=http,  # type: ignore[arg-type]
        ) as client,
    ):  # fmt: skip
        client.chat.completions.create(model="m", messages=USER, max_tokens=2)


async def test_the_sync_sdks_timeout_holds_over_the_sync_transport(sim: SimHandle) -> None:
    sim.configure({"latency": {"ttft_ms": 3000}})
    gateway = Gateway(Settings.for_upstream(sim.base_url))
    with pytest.raises(openai.APITimeoutError):
        await asyncio.to_thread(sync_call_with_timeout, gateway, timeout=0.5)
    assert await settled(sim) == 0
