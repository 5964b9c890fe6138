"""What the gateway tells the client's SDK about retrying, checked with the official OpenAI SDK
at its default `max_retries`: retries must not multiply across the two layers."""

from __future__ import annotations

import openai
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import USER, GatewayFactory

FAST_RETRIES = {"traffic": {"retry": {"base_seconds": 0.01, "cap_seconds": 0.02}}}


async def test_a_failure_levergate_already_retried_is_not_retried_again_by_the_sdk(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    sim.configure({"faults": {"error_rate": 1.0}})
    values = {"traffic": {"retry": {**FAST_RETRIES["traffic"]["retry"], "max_attempts": 3}}}
    async with (
        gateway_at(sim.base_url, **values) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client") as sdk,
    ):
        assert sdk.max_retries == 2  # the SDK's default: it would retry a bare 502 twice
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 502
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert sim.stats()["requests_total"] == 3  # levergate's attempts only, not 3 x 3


async def test_a_failure_levergate_did_not_retry_is_left_to_the_sdk(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    sim.configure({"faults": {"error_rate": 1.0}})
    values = {"traffic": {"retry": {"enabled": False}}}
    async with (
        gateway_at(sim.base_url, **values) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=1) as sdk,
    ):
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(model="m", messages=USER)
    assert "x-should-retry" not in caught.value.response.headers
    assert sim.stats()["requests_total"] == 2  # the SDK's own retry still happens
