"""Real servers on loopback: the simulator as the provider, the gateway in front of it, and the
official OpenAI SDK as the client."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator
from tests.e2e.llama_rig import llama  # noqa: F401 - llama_cpp.server, one per module using it

GatewayFactory = Callable[..., AbstractAsyncContextManager[str]]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts; each is terminated (killed if it hangs) afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[SimHandle]:
    """The simulator on a free port. Parametrize it indirectly with a JSON style to run a test
    against both: `@BOTH_JSON_STYLES` (compact as OpenAI writes, spaced as Python servers do)."""
    spaced = getattr(request, "param", "compact") == "spaced"
    async with run_simulator(SimSettings(port=0, spaced_json=spaced)) as handle:
        yield handle


BOTH_JSON_STYLES = pytest.mark.parametrize("sim", ["compact", "spaced"], indirect=True)


@pytest.fixture
def gateway_at() -> GatewayFactory:
    """`async with gateway_at(upstream_url, **settings) as base_url:` a gateway on a free port."""

    @asynccontextmanager
    async def start(upstream: str, **values: Any) -> AsyncIterator[str]:
        values.setdefault("server", {})["port"] = 0
        settings = Settings.for_upstream(upstream, **values)
        async with build_gateway(settings) as gateway, serving(gateway) as url:
            yield url

    return start


@pytest.fixture
def gateway_for() -> GatewayFactory:
    """`async with gateway_for(upstreams=[...], models=[...]) as base_url:` from full settings."""

    @asynccontextmanager
    async def start(**values: Any) -> AsyncIterator[str]:
        values.setdefault("server", {})["port"] = 0
        async with build_gateway(Settings.load(**values)) as gateway, serving(gateway) as url:
            yield url

    return start


@pytest.fixture
async def proxy(sim: SimHandle, gateway_at: GatewayFactory) -> AsyncIterator[str]:
    async with gateway_at(sim.base_url) as url:
        yield url


@pytest.fixture
async def client(proxy: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=proxy, api_key="sk-client", max_retries=0) as sdk:
        yield sdk


USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something simulated."}]
