"""The simulator's Anthropic routes without sockets: the breakpoint prompt-cache accounting
(5m / 1h TTLs, minimum length, expiry, at most four breakpoints), faults in Anthropic's shape,
the header checks, and the rate-limit headers' RFC 3339 resets under a manual clock."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from levergate.protocol.sse import SSEDecoder
from levergate.simulator import SimSettings, Simulator
from levergate.simulator.responses import Reply
from levergate.testing import ManualClock

HELLO = [{"role": "user", "content": "Hello"}]
VERSION = {"anthropic-version": "2023-06-01"}


def make(clock: ManualClock | None = None, **values: Any) -> Simulator:
    return Simulator(
        settings=SimSettings.model_validate(values),
        clock=clock or ManualClock(),
        wall=lambda: 1_764_610_000.0,
    )


def post(sim: Simulator, body: Any, *, path: str = "/v1/messages", **headers: str) -> Reply:
    wanted = {"x-api-key": "sk-ant-unit", **VERSION, **headers}
    reply = sim.handle(method="POST", path=path, headers=wanted, body=orjson.dumps(body))
    sim.finish(reply)
    return reply


def message(sim: Simulator, **extra: Any) -> dict[str, Any]:
    headers = extra.pop("headers", {})
    reply = post(sim, {"model": "c", "max_tokens": 8, "messages": HELLO, **extra}, **headers)
    assert reply.status == 200, reply.body
    parsed: dict[str, Any] = orjson.loads(reply.body)
    return parsed


def block(text: str, ttl: str | None = None) -> dict[str, Any]:
    marker = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {"type": "text", "text": text, "cache_control": marker}


LONG = "word " * 1000  # 1250 tokens at four characters a token


def test_breakpoints_write_then_read_with_their_ttls() -> None:
    clock = ManualClock()
    sim = make(clock)
    system = [block(LONG, "1h"), block(LONG, "5m")]
    first = message(sim, system=system)["usage"]
    assert first["cache_read_input_tokens"] == 0
    creation = first["cache_creation"]
    # The first stretch ends at the 1h breakpoint, the second at the 5m one.
    assert creation["ephemeral_1h_input_tokens"] > 1024
    assert creation["ephemeral_5m_input_tokens"] > 1024
    assert first["cache_creation_input_tokens"] == sum(creation.values())
    second = message(sim, system=system)["usage"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    assert second["input_tokens"] == first["input_tokens"]
    clock.advance(301)  # the 5m entry is gone, the 1h one is alive
    third = message(sim, system=system)["usage"]
    assert third["cache_read_input_tokens"] == creation["ephemeral_1h_input_tokens"]
    assert third["cache_creation"] == {
        "ephemeral_5m_input_tokens": creation["ephemeral_5m_input_tokens"],
        "ephemeral_1h_input_tokens": 0,
    }


def test_short_prefixes_and_unmarked_prompts_are_not_cached() -> None:
    sim = make()
    for _ in range(2):
        usage = message(sim, system=[block("short")])["usage"]
        assert usage["cache_creation_input_tokens"] == 0
        assert usage["cache_read_input_tokens"] == 0
        plain = message(sim, system=LONG)["usage"]
        assert plain["cache_read_input_tokens"] == 0
    counted = post(
        sim, {"model": "c", "messages": HELLO, "system": LONG}, path="/v1/messages/count_tokens"
    )
    assert orjson.loads(counted.body)["input_tokens"] == plain["input_tokens"]


def test_top_level_cache_control_marks_the_last_block() -> None:
    sim = make()
    body = {"cache_control": {"type": "ephemeral"}, "messages": [{"role": "user", "content": LONG}]}
    assert message(sim, **body)["usage"]["cache_creation_input_tokens"] > 1024
    assert message(sim, **body)["usage"]["cache_read_input_tokens"] > 1024


def test_more_than_four_breakpoints_is_a_400() -> None:
    reply = post(
        sim := make(),
        {"model": "c", "max_tokens": 8, "messages": HELLO, "system": [block("x")] * 5},
    )
    assert reply.status == 400
    error = orjson.loads(reply.body)
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "4" in error["error"]["message"]
    assert sim.stats.in_flight == 0


@pytest.mark.parametrize(
    ("headers", "status", "kind"),
    [
        ({"x-api-key": ""}, 401, "authentication_error"),
        ({"anthropic-version": ""}, 400, "invalid_request_error"),
        ({"x-sim-fault": "529"}, 529, "overloaded_error"),
        ({"x-sim-fault": "503"}, 529, "overloaded_error"),
        ({"x-sim-fault": "500"}, 500, "api_error"),
        ({"x-sim-fault": "429"}, 429, "rate_limit_error"),
    ],
)
def test_refusals_have_anthropic_shape(headers: dict[str, str], status: int, kind: str) -> None:
    reply = post(make(), {"model": "c", "max_tokens": 8, "messages": HELLO}, **headers)
    assert reply.status == status
    body = orjson.loads(reply.body)
    assert body["error"]["type"] == kind
    assert body["request_id"].startswith("req_")
    assert dict(reply.headers)["request-id"] == body["request_id"]


def test_missing_max_tokens_and_bad_roles_are_400s() -> None:
    sim = make()
    assert post(sim, {"model": "c", "messages": HELLO}).status == 400
    bad = post(
        sim, {"model": "c", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}
    )
    assert bad.status == 400
    assert "role" in orjson.loads(bad.body)["error"]["message"]


def test_rate_limit_headers_and_429() -> None:
    sim = make(limits={"rpm": 1})
    ok = post(sim, {"model": "c", "max_tokens": 8, "messages": HELLO})
    headers = dict(ok.headers)
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert headers["anthropic-ratelimit-requests-reset"] == "2025-12-01T17:27:40Z"  # wall + 60 s
    refused = post(sim, {"model": "c", "max_tokens": 8, "messages": HELLO})
    assert refused.status == 429
    assert orjson.loads(refused.body)["error"]["type"] == "rate_limit_error"
    names = dict(refused.headers)
    assert names["retry-after"] == "60"
    assert not any(name.startswith("x-ratelimit") for name in names)


def test_streamed_faults_cut_or_break_the_event_stream() -> None:
    sim = make()
    body = {"model": "c", "max_tokens": 8, "messages": HELLO, "stream": True}
    whole = post(sim, body)
    assert whole.events is not None
    datas = [d for e in whole.events for d in SSEDecoder().feed(e)]
    kinds = [orjson.loads(d)["type"] for d in datas]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    cut = post(sim, body, **{"x-sim-fault": "disconnect"})
    assert cut.cut_after is not None
    assert cut.cut_after < len(whole.events)
    broken = post(sim, body, **{"x-sim-fault": "malformed"})
    assert broken.events is not None
    assert b"message_stop" not in b"".join(broken.events)
