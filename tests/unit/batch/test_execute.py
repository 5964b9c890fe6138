"""A batch line through a gateway whose own limits shed it: it waits and goes again without
spending an attempt (only the provider's refusals count), so a large `concurrency` can queue
lines behind the limiter without failing them."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from levergate.batch.execute import LineExecutor
from levergate.batch.model import Claim
from levergate.batch.runner import Done, Later
from levergate.config import Settings
from levergate.core.call import Call
from levergate.core.reply import Completed, Reply
from levergate.errors import Overloaded, UpstreamRejected
from levergate.gateway import Gateway
from levergate.testing import LoopClock, run_virtual

LINE = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
CLAIM = Claim("batch_1", 0, "line-0", LINE, 1, "default", "/v1/chat/completions", None)


class ShedTwice(Gateway):
    """The real gateway's call building, its `serve` scripted: shed by its own limits twice
    (Overloaded, as layers/traffic/keys.py raises it), then the provider's answer or refusal."""

    def __init__(self, last: Exception | None = None) -> None:
        super().__init__(Settings.load(upstreams=[{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
                                       models=[{"name": "m", "upstream": "u"}]))  # fmt: skip
        self._last, self.served = last, 0
        self.pipeline.shared.__dict__["clock"] = LoopClock()  # frozen: virtual time in tests

    async def serve(self, call: Call) -> Reply:
        self.served += 1
        if self.served <= 2:
            raise Overloaded("at capacity", code="capacity_exceeded", retry_after=7.0)
        if self._last is not None:
            raise self._last
        return Completed(data={"id": "x", "choices": []})


def run(gateway: Any) -> tuple[Done | Later, float]:
    """The outcome and the (virtual) seconds it took."""

    async def go() -> tuple[Done | Later, float]:
        outcome = await LineExecutor(gateway, settings=Settings.load().batch)(CLAIM)
        return outcome, asyncio.get_running_loop().time()

    return run_virtual(go())


def test_a_line_the_gateway_sheds_waits_and_answers_without_spending_attempts() -> None:
    gateway = ShedTwice()
    outcome, took = run(gateway)
    assert isinstance(outcome, Done)
    assert outcome.ok
    assert gateway.served == 3
    assert took == 14.0  # both retry-afters waited on the gateway's clock


def test_a_provider_refusal_still_gives_the_line_back_as_an_attempt() -> None:
    refusal = UpstreamRejected("slow down", upstream="u", upstream_status=429, retry_after=3.0)
    outcome, _ = run(ShedTwice(last=refusal))
    assert outcome == Later(5.0)  # the provider's 3 s, floored by batch.retry_seconds
