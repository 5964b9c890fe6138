"""Cascades end to end: the official OpenAI SDK through the proxy to the simulator, which finds
prompts containing HARD hard (low logprobs, cut-short JSON) unless it is the strong model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client import generate_latest

from levergate.config import Settings
from levergate.core.call import Trace
from levergate.core.reply import Completed
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator

HARD_SIM = {"marker": "HARD", "strong_models": ["sim-large"], "json_answers": True}
SCHEMA = {
    "type": "object",
    "required": ["answer", "confidence"],
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
}
EASY: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is two plus two?"}]
HARD: list[ChatCompletionMessageParam] = [{"role": "user", "content": "HARD: prove it."}]


@pytest.fixture
async def sims() -> AsyncIterator[tuple[SimHandle, SimHandle]]:
    """The provider, and a second one that fails every request (a strong model that is down)."""
    async with (
        run_simulator(SimSettings.model_validate({"port": 0, "hard": HARD_SIM})) as good,
        run_simulator(
            SimSettings.model_validate({"port": 0, "faults": {"error_rate": 1.0}})
        ) as down,
    ):
        yield good, down


def _settings(good: SimHandle, down: SimHandle) -> dict[str, Any]:
    return {
        "server": {"port": 0},
        "traffic": {"retry": {"enabled": False}},
        "upstreams": [
            {"name": "sim", "base_url": good.base_url},
            {"name": "down", "base_url": down.base_url},
        ],
        "models": [
            {"name": "small", "upstream": "sim", "upstream_model": "sim-small"},
            {"name": "large", "upstream": "sim", "upstream_model": "sim-large"},
            {"name": "broken", "upstream": "down", "upstream_model": "sim-large"},
        ],
        "cascade": {
            "checks": [{"kind": "mean_logprob", "threshold": -0.5}],
            "cascades": [
                {"name": "json-qa", "steps": ["small", "large"],
                 "checks": [{"kind": "json_schema", "schema": SCHEMA}]},
                {"name": "reported", "steps": ["small", "large"],
                 "checks": [{"kind": "confidence_field", "threshold": 0.5}]},
            ],
        },
    }  # fmt: skip


@asynccontextmanager
async def _proxy(good: SimHandle, down: SimHandle) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        Gateway(Settings.load(**_settings(good, down))) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as sdk,
    ):
        yield sdk


async def test_an_easy_prompt_is_answered_by_the_cheap_model(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="cascade:small>large", messages=EASY
        )
        answer = raw.parse()
    assert raw.headers["x-levergate-cascade"] == "accepted"
    assert raw.headers["x-levergate-cascade-alias"] == "small"
    assert answer.model == "sim-small"
    # The cascade asked for logprobs to judge; the client did not, so it gets none.
    assert answer.choices[0].logprobs is None
    assert good.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 1


async def test_a_hard_prompt_escalates_to_the_strong_model(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="cascade:small>large", messages=HARD, logprobs=True
        )
        answer = raw.parse()
    assert raw.headers["x-levergate-cascade"] == "escalated"
    assert raw.headers["x-levergate-cascade-alias"] == "large"
    assert answer.model == "sim-large"
    assert answer.choices[0].logprobs is not None  # asked for by the client: kept
    assert good.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 2


async def test_when_the_strong_model_fails_the_cheap_answer_is_returned_and_marked(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        # temperature 0: an answer the exact cache would keep, were it not a fallback.
        raw = await sdk.chat.completions.with_raw_response.create(
            model="cascade:small>broken", messages=HARD, temperature=0
        )
        answer = raw.parse()
        again = await sdk.chat.completions.with_raw_response.create(
            model="cascade:small>broken", messages=HARD, temperature=0
        )
        easy = [await sdk.chat.completions.with_raw_response.create(
            model="cascade:small>broken", messages=EASY, temperature=0
        ) for _ in range(2)]  # fmt: skip
    assert raw.headers["x-levergate-cascade"] == "fallback-to-cheap"
    assert raw.headers["x-levergate-cascade-alias"] == "small"
    assert answer.model == "sim-small"
    # The rejected answer served in need is not cached: the next request tries again.
    assert again.headers["x-levergate-cascade"] == "fallback-to-cheap"
    assert down.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 2
    # ...while an accepted answer is cached like any other.
    assert [r.headers["x-levergate-cache"] for r in easy] == ["miss", "hit"]
    assert good.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 3


async def test_a_streaming_client_gets_the_final_models_stream(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        for messages, model in [(EASY, "sim-small"), (HARD, "sim-large")]:
            stream = await sdk.chat.completions.create(
                model="cascade:small>large", messages=messages, stream=True, max_tokens=6
            )
            chunks = [chunk async for chunk in stream]
            assert {c.model for c in chunks} == {model}
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text.startswith('{"answer": "')
            assert chunks[-1].choices[0].finish_reason == "length"
            assert all(c.choices[0].logprobs is None for c in chunks if c.choices)


async def test_an_answer_that_fails_the_json_schema_escalates(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        easy = await sdk.chat.completions.with_raw_response.create(model="json-qa", messages=EASY)
        hard = await sdk.chat.completions.with_raw_response.create(model="json-qa", messages=HARD)
        reported = await sdk.chat.completions.with_raw_response.create(
            model="reported", messages=HARD
        )
    assert easy.headers["x-levergate-cascade-alias"] == "small"
    assert hard.headers["x-levergate-cascade-alias"] == "large"  # the cut-short JSON failed
    assert reported.headers["x-levergate-cascade-alias"] == "large"  # confidence 0.14 < 0.5


@pytest.mark.parametrize(
    ("model", "code"),
    [
        ("cascade:small", "invalid_cascade"),
        ("cascade:small>large>broken>small>large", "invalid_cascade"),
        ("cascade:small>ghost", "model_not_found"),
        ("cascade:small>>large", "invalid_cascade"),
        ("cascade:", "invalid_cascade"),
        ("cascade:small>small", "invalid_cascade"),
        ("cascade:" + "x>" * 2000, "invalid_cascade"),
    ],
)
async def test_bad_cascade_names_are_a_400(
    sims: tuple[SimHandle, SimHandle], model: str, code: str
) -> None:
    good, down = sims
    async with _proxy(good, down) as sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(model=model, messages=EASY)
    assert caught.value.code == code
    assert good.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0) == 0


async def test_the_trace_records_the_decision_and_what_was_paid_for(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    """In-process, to read the call's record: escalation, route decision, side spend."""
    good, down = sims
    async with Gateway(Settings.load(**_settings(good, down))) as gateway:
        trace = Trace()
        body = {"model": "cascade:small>large", "messages": HARD, "max_tokens": 5}
        reply = await gateway.serve(gateway.make_call("chat", body, trace=trace))
        assert isinstance(reply, Completed)
        metrics = generate_latest(gateway.pipeline.shared.registry).decode()
    assert trace.route is not None
    assert (trace.route.router, trace.route.chosen, trace.route.default) == (
        "cascade", "large", "large",
    )  # fmt: skip
    assert "rejected by mean_logprob" in trace.route.reason
    assert trace.escalations == 1
    assert trace.alias == "large"
    [spend] = trace.side_spend
    assert (spend.alias, spend.purpose, spend.output) == ("small", "cascade", 5)
    assert spend.input_uncached > 0
    assert 'levergate_cascade_escalations_total{cascade="cascade:small>large"' in metrics
    assert 'levergate_cascade_confidence_bucket{cascade="cascade:small>large"' in metrics
