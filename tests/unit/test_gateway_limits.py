"""What `Gateway.make_call` does with the client's numbers before any layer runs: the body's
counts are bounded and `x-levergate-timeout` is checked and clamped (issue 10, defect 4)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from levergate.config import Settings
from levergate.errors import BadRequest
from levergate.gateway import Gateway

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    limits = {"max_timeout_seconds": 5, "min_timeout_seconds": 0.5, "max_n": 2}
    gateway = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1", limits=limits))
    yield gateway
    await gateway.aclose()


def test_a_timeout_beyond_the_maximum_is_clamped(gateway: Gateway) -> None:
    for text in ("1e300", "6", "5"):
        call = gateway.make_call("chat", BODY, headers={"x-levergate-timeout": text})
        assert call.ctx.controls.deadline is not None
        assert call.ctx.controls.deadline - time.monotonic() <= 5
    call = gateway.make_call("chat", BODY, headers={"x-levergate-timeout": "2.5"})
    assert call.ctx.controls.deadline is not None
    assert 2 < call.ctx.controls.deadline - time.monotonic() <= 2.5


@pytest.mark.parametrize("text", ["0.4", "0", "-3", "nan", "inf", "-inf", "soon", "1e400"])
def test_a_timeout_no_answer_can_meet_is_a_400(gateway: Gateway, text: str) -> None:
    with pytest.raises(BadRequest) as caught:
        gateway.make_call("chat", BODY, headers={"x-levergate-timeout": text})
    assert "x-levergate-timeout" in caught.value.message


def test_the_configured_body_limits_apply(gateway: Gateway) -> None:
    with pytest.raises(BadRequest) as caught:
        gateway.make_call("chat", {**BODY, "n": 3})
    assert caught.value.param == "n"
