"""`Gateway.make_call`: a request's deadline is a time on the gateway's own clock."""

from __future__ import annotations

from levergate.config import Settings
from levergate.control_headers import TIMEOUT_HEADER
from levergate.gateway import Gateway
from levergate.pipeline import Deps
from levergate.testing import ManualClock

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_the_deadline_is_set_on_the_gateways_clock() -> None:
    clock = ManualClock(start=1000.0)
    gateway = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1"), deps=Deps(clock=clock))
    try:
        call = gateway.make_call("chat", BODY, headers={TIMEOUT_HEADER: "2.5"})
        assert call.ctx.controls.deadline == 1002.5
        assert gateway.make_call("chat", BODY).ctx.controls.deadline is None
    finally:
        await gateway.aclose()
