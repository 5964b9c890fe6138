"""The simulator's decisions, without sockets: shapes, errors, limits, faults, prompt cache."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from levergate.simulator import SimSettings, Simulator
from levergate.simulator.responses import Reply
from levergate.testing import ManualClock

USER = [{"role": "user", "content": "Hello there"}]


def make(clock: ManualClock | None = None, **values: Any) -> Simulator:
    return Simulator(settings=SimSettings.model_validate(values), clock=clock or ManualClock())


def post(
    sim: Simulator, path: str, body: Any, *, key: str | None = "sk-test", **headers: str
) -> Reply:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    wanted = {name.replace("_", "-"): value for name, value in headers.items()}
    if key is not None:
        wanted["authorization"] = f"Bearer {key}"
    reply = sim.handle(method="POST", path=path, headers=wanted, body=raw)
    sim.finish(reply)
    return reply


def chat(sim: Simulator, **extra: Any) -> Reply:
    headers = extra.pop("headers", {})
    return post(sim, "/v1/chat/completions", {"model": "m", "messages": USER, **extra}, **headers)


def test_a_chat_completion_has_openai_shape_and_default_length() -> None:
    reply = chat(make())
    body = orjson.loads(reply.body)
    assert reply.status == 200
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["system_fingerprint"] == "levergate-sim"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    usage = body["usage"]
    assert usage["completion_tokens"] == 16 == len(choice["message"]["content"].split())
    assert usage["total_tokens"] == usage["prompt_tokens"] + 16
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_same_request_same_answer_and_caps_give_prefixes() -> None:
    sim = make()
    one = orjson.loads(chat(sim, max_tokens=8).body)
    two = orjson.loads(chat(sim, max_tokens=8).body)
    longer = orjson.loads(chat(sim, max_completion_tokens=12).body)
    text = one["choices"][0]["message"]["content"]
    assert text == two["choices"][0]["message"]["content"]
    assert longer["choices"][0]["message"]["content"].startswith(text)
    assert one["choices"][0]["finish_reason"] == "length"
    assert one["id"] != two["id"]
    other_seed = orjson.loads(chat(make(seed=9), max_tokens=8).body)
    assert other_seed["choices"][0]["message"]["content"] != text


def test_output_tokens_header_sets_a_natural_stop_under_the_cap() -> None:
    sim = make()
    stop = orjson.loads(chat(sim, max_tokens=10, headers={"x_sim_output_tokens": "4"}).body)
    assert stop["choices"][0]["finish_reason"] == "stop"
    assert stop["usage"]["completion_tokens"] == 4
    cut = orjson.loads(chat(sim, max_tokens=3, headers={"x_sim_output_tokens": "4"}).body)
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == 3


def test_n_gives_distinct_choices() -> None:
    body = orjson.loads(chat(make(), n=3, max_tokens=5).body)
    contents = [choice["message"]["content"] for choice in body["choices"]]
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2]
    assert len(set(contents)) == 3
    assert body["usage"]["completion_tokens"] == 15


def events(reply: Reply) -> list[Any]:
    assert reply.events is not None
    return [
        event.removeprefix(b"data: ").strip()
        if event.strip() == b"data: [DONE]"
        else orjson.loads(event.removeprefix(b"data: "))
        for event in reply.events
    ]


def test_stream_is_role_then_one_token_per_chunk_then_finish_usage_done() -> None:
    reply = chat(make(), stream=True, max_tokens=3, stream_options={"include_usage": True})
    assert reply.content_type.startswith("text/event-stream")
    chunks = events(reply)
    assert chunks[-1] == b"[DONE]"
    role, *tokens, finish, usage = chunks[:-1]
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert len(tokens) == 3
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks[:-1])
    assert all("usage" in chunk and chunk["usage"] is None for chunk in [role, *tokens, finish])
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 3


def test_stream_without_include_usage_has_no_usage_fields() -> None:
    chunks = events(chat(make(), stream=True, max_tokens=2))
    assert all("usage" not in chunk for chunk in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_completions_take_prompt_lists() -> None:
    reply = post(make(), "/v1/completions", {"model": "m", "prompt": ["a b", "c"], "max_tokens": 2})
    body = orjson.loads(reply.body)
    assert body["object"] == "text_completion"
    assert [choice["index"] for choice in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 4
    streamed = post(make(), "/v1/completions", {"model": "m", "prompt": "x", "stream": True})
    chunks = events(streamed)
    assert chunks[0]["object"] == "text_completion"
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]).count(" ") == 15


def test_embeddings_are_deterministic_and_sized() -> None:
    sim = make(embedding_dim=32)
    one = orjson.loads(post(sim, "/v1/embeddings", {"model": "e", "input": ["a", "b"]}).body)
    two = orjson.loads(post(sim, "/v1/embeddings", {"model": "e", "input": "a"}).body)
    assert one["object"] == "list"
    assert [len(item["embedding"]) for item in one["data"]] == [32, 32]
    assert one["data"][0]["embedding"] == two["data"][0]["embedding"]
    assert one["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
    small = orjson.loads(
        post(sim, "/v1/embeddings", {"model": "e", "input": "a", "dimensions": 4}).body
    )
    assert len(small["data"][0]["embedding"]) == 4
    b64 = orjson.loads(
        post(sim, "/v1/embeddings", {"model": "e", "input": "a", "encoding_format": "base64"}).body
    )
    assert isinstance(b64["data"][0]["embedding"], str)


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v1/chat/completions", b"{bad", 400, "not valid JSON"),
        ("/v1/chat/completions", b"", 400, "empty"),
        ("/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
        ("/v1/chat/completions", {"messages": USER}, 400, "'model'"),
        ("/v1/chat/completions", {"model": "m"}, 400, "'messages'"),
        ("/v1/chat/completions", {"model": "m", "messages": []}, 400, "non-empty"),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": USER, "max_tokens": 0},
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": USER, "max_tokens": 10**6},
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": USER, "stream_options": {}},
            400,
            "stream",
        ),
        ("/v1/completions", {"model": "m"}, 400, "'prompt'"),
        ("/v1/completions", {"model": "m", "prompt": [{"x": 1}]}, 400, "prompt"),
        ("/v1/embeddings", {"model": "m", "input": ""}, 400, "input"),
        ("/v1/embeddings", {"model": "m", "input": "a", "encoding_format": "hex"}, 400, "encoding"),
        ("/v1/nothing", {}, 404, "Invalid URL"),
    ],
)
def test_bad_requests_get_openai_errors(path: str, body: Any, status: int, fragment: str) -> None:
    reply = post(make(), path, body)
    assert reply.status == status
    error = orjson.loads(reply.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert fragment in error["message"]


def test_wrong_method_is_405_with_allow() -> None:
    reply = make().handle(method="GET", path="/v1/chat/completions", headers={}, body=b"")
    assert reply.status == 405
    assert ("allow", "POST") in reply.headers


def test_strict_models_404_unknown_models() -> None:
    reply = chat(make(strict_models=True, models=["known"]))
    assert reply.status == 404
    assert orjson.loads(reply.body)["error"]["code"] == "model_not_found"


def test_context_window_is_enforced() -> None:
    reply = chat(make(context_window=10), max_tokens=8)
    assert reply.status == 400
    assert orjson.loads(reply.body)["error"]["code"] == "context_length_exceeded"


def test_rpm_limit_gives_429_with_openai_headers_and_recovers() -> None:
    clock = ManualClock()
    sim = make(clock, limits={"rpm": 2})
    ok = chat(sim)
    assert dict(ok.headers)["x-ratelimit-remaining-requests"] == "1"
    chat(sim)
    refused = chat(sim)
    assert refused.status == 429
    headers = dict(refused.headers)
    assert headers["retry-after"] == "60"
    assert headers["retry-after-ms"] == "60000"
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "1m0s"
    error = orjson.loads(refused.body)["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert chat(sim, headers={"key": None}).status == 200  # another key, its own window
    clock.advance(60)
    assert chat(sim).status == 200
    assert sim.snapshot()["rate_limited"] == 1


def test_tpm_counts_prompt_plus_max_tokens_at_admission() -> None:
    sim = make(limits={"tpm": 100})
    assert chat(sim, max_tokens=90).status == 200
    refused = chat(sim, max_tokens=90)
    assert refused.status == 429
    assert orjson.loads(refused.body)["error"]["type"] == "tokens"
    too_big = chat(make(limits={"tpm": 100}), max_tokens=200)
    assert too_big.status == 429
    assert "Request too large" in orjson.loads(too_big.body)["error"]["message"]
    assert "retry-after" not in dict(too_big.headers)


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("500", lambda r: r.status == 500),
        ("503", lambda r: r.status == 503),
        ("429", lambda r: r.status == 429 and dict(r.headers)["retry-after"] == "1"),
        ("hang", lambda r: r.hang),
        ("disconnect", lambda r: r.cut_after == len(r.body) // 2),
        ("malformed", lambda r: r.status == 200 and not r.body.endswith(b"}")),
        ("slow", lambda r: r.delay == 2.0),
    ],
)
def test_forced_faults(fault: str, check: Any) -> None:
    sim = make()
    reply = chat(sim, headers={"x_sim_fault": fault})
    assert check(reply)
    assert sim.snapshot()["faults_injected"] == {fault: 1}


def test_unknown_forced_fault_is_a_400() -> None:
    assert chat(make(), headers={"x_sim_fault": "boom"}).status == 400


def test_streamed_disconnect_cuts_before_done() -> None:
    reply = chat(
        make(faults={"disconnect_after_chunks": 2}),
        stream=True,
        headers={"x_sim_fault": "disconnect"},
    )
    assert reply.cut_after == 2
    assert reply.events is not None
    assert reply.events[-1] == b"data: [DONE]\n\n"


def test_prompt_cache_hit_reports_cached_tokens_and_cuts_prefill() -> None:
    sim = make(latency={"ttft_ms": 10, "prefill_ms_per_token": 1})
    long_prompt = [{"role": "user", "content": "word " * 1200}]
    first = chat(sim, messages=long_prompt)
    second = chat(sim, messages=long_prompt)
    cached = orjson.loads(second.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert orjson.loads(first.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cached >= 1024
    assert cached % 128 == 0
    assert second.delay < first.delay
    other_key = chat(sim, messages=long_prompt, headers={"key": "sk-other"})
    assert orjson.loads(other_key.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert sim.snapshot()["prompt_cache"]["hits"] == 1


def test_in_flight_is_counted_until_finished() -> None:
    sim = make()
    reply = sim.handle(
        method="POST", path="/v1/chat/completions", headers={},
        body=orjson.dumps({"model": "m", "messages": USER}),
    )  # fmt: skip
    assert sim.snapshot()["in_flight"] == 1
    sim.finish(reply)
    sim.finish(reply)
    assert sim.snapshot()["in_flight"] == 0
    assert sim.snapshot()["max_in_flight"] == 1


def test_max_concurrency_refuses_with_429() -> None:
    sim = make(limits={"max_concurrency": 1})
    body = orjson.dumps({"model": "m", "messages": USER})
    held = sim.handle(method="POST", path="/v1/chat/completions", headers={}, body=body)
    refused = sim.handle(method="POST", path="/v1/chat/completions", headers={}, body=body)
    assert refused.status == 429
    assert orjson.loads(refused.body)["error"]["code"] == "concurrency_limit_exceeded"
    sim.finish(held)


def test_stats_count_by_endpoint_key_and_status() -> None:
    sim = make()
    chat(sim)
    chat(sim, headers={"key": "sk-a-long-key-1234"})
    post(sim, "/v1/nothing", {})
    stats = sim.snapshot()
    assert stats["simulated"] is True
    assert stats["requests_by_endpoint"] == {"/v1/chat/completions": 2, "(unknown)": 1}
    assert stats["requests_by_key"] == {"sk-test": 1, "sk-...1234": 1}
    assert stats["responses_by_status"] == {"200": 2, "404": 1}
    assert stats["tokens"]["completion"] == 32


def test_drawn_faults_repeat_for_the_same_seed_and_order() -> None:
    def statuses(seed: int) -> list[int]:
        sim = make(seed=seed, faults={"error_rate": 0.5})
        return [chat(sim).status for _ in range(40)]

    first = statuses(1)
    assert first == statuses(1)
    assert {200, 500, 503} <= set(first)
    assert statuses(2) != first


def test_total_output_is_capped() -> None:
    reply = chat(make(), n=128, max_tokens=16_384)
    assert reply.status == 400
    assert "at most" in orjson.loads(reply.body)["error"]["message"]


def test_spaced_json_writes_what_pythons_json_dumps_writes_and_means_the_same() -> None:
    stream = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 3}
    compact, spaced = make(), make(spaced_json=True)
    body, spaced_body = chat(compact, max_tokens=3).body, chat(spaced, max_tokens=3).body
    assert b'"usage": {' in spaced_body
    assert b'"usage":{' not in spaced_body
    assert orjson.loads(spaced_body) == orjson.loads(body)
    events = chat(spaced, **stream).events
    assert events is not None
    assert b'"usage": {"prompt_tokens"' in events[-2]
    assert b'"choices": []' in events[-2]
