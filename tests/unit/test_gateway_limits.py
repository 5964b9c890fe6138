"""What `Gateway.make_call` does with the client's numbers before any layer runs: the body's
counts are bounded and `x-levergate-timeout` is checked and clamped (issue 10, defect 4)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.config import Settings
from levergate.core.call import Kind
from levergate.core.json_bound import parse_json
from levergate.errors import BadRequest
from levergate.gateway import Gateway
from levergate.protocol.openai.body import check_body

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


# Bodies near the line: most fields take a value that passes or one that does not.
_BODIES = st.fixed_dictionaries({}, optional={
    "model": st.sampled_from(["m", "m", 3, None]),
    "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", 3])}),
                         max_size=2) | st.just("hi"),
    "prompt": st.sampled_from(["hi", ["a"], 5]),
    "n": st.integers(0, 3),
    "max_tokens": st.integers(-1, 2),
    "stop": st.lists(st.sampled_from(["a", 1]), max_size=5),
    "stream": st.booleans() | st.just("yes"),
})  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(_BODIES, min_size=1, max_size=3),
    asks=st.lists(st.tuples(st.sampled_from(["chat", "completion"]), st.integers(0, 2)),
                  min_size=1, max_size=12),
)  # fmt: skip
def test_a_body_met_again_gets_the_verdict_it_got_first(
    bodies: list[dict[str, Any]], asks: list[tuple[Kind, int]]
) -> None:
    """`make_call` remembers a body that passed by its raw bytes and kind (`CheckedBodies`):
    whatever the order, each call gets the verdict a fresh check gives."""
    gateway = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1", limits={"max_n": 2}))
    limits = gateway.settings.limits
    raws = [orjson.dumps(body) for body in bodies]
    for kind, at in asks:
        raw = raws[at % len(raws)]
        try:
            check_body(kind, parse_json(raw), limits=limits)
            fresh = None
        except BadRequest as exc:
            fresh = exc.param
        try:
            call = gateway.make_call(kind, parse_json(raw), raw=raw)
            got = None
            assert call.raw is raw
        except BadRequest as exc:
            got = exc.param
        assert (got, kind) == (fresh, kind)


async def test_a_reloaded_gateway_checks_a_remembered_body_under_its_own_limits() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"n":3}'
    loose = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1"))
    strict = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1", limits={"max_n": 2}))
    try:
        for _ in range(2):
            loose.make_call("chat", parse_json(raw), raw=raw)
            with pytest.raises(BadRequest) as caught:
                strict.make_call("chat", parse_json(raw), raw=raw)
            assert caught.value.param == "n"
    finally:
        await loose.aclose()
        await strict.aclose()
