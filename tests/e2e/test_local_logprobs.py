"""The embedded default as a newcomer meets it (issue 19): its settings (`local_settings`, what
`levergate serve` builds with no upstream) behind a real server on loopback, the official
OpenAI SDK as the client. Token logprobs in OpenAI's shapes, whole and streamed, on chat and
legacy completions and through prompt-lookup decoding; cascades over its own aliases, whose
default check reads those logprobs; and its `auto` route."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionTokenLogprob
from prometheus_client.parser import text_string_to_metric_families

from levergate.cli.embedded import local_settings
from levergate.config import CascadeSettings, Settings
from levergate.gateway import Gateway
from levergate.server.run import serving

FRANCE: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]
COPY: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Repeat exactly: the quick brown fox jumps over the lazy dog, "
     "the quick brown fox jumps over the lazy dog."}
]  # fmt: skip


@pytest.fixture
async def base_url(tmp_path: Path) -> AsyncIterator[str]:
    """The embedded default's settings, with a small engine that starts fast (the bundled file
    as it is, one thread) and named cascades whose checks always pass or always fail."""
    cascade = CascadeSettings.model_validate({
        "cascades": [
            {"name": "lenient", "steps": ["smollm2", "smollm2-lookup"],
             "checks": [{"kind": "mean_logprob", "threshold": -50}]},
            {"name": "strict", "steps": ["smollm2", "smollm2-lookup"],
             "checks": [{"kind": "mean_logprob", "threshold": 0}]},
        ]
    })  # fmt: skip
    settings = local_settings(Settings.load(server={"port": 0}))
    small = {"requantize": "off", "threads": 1, "slots": 4, "n_ctx": 2048,
             "cache_dir": str(tmp_path)}  # fmt: skip
    engine = settings.upstreams[0].model_copy(update=small)
    settings = settings.model_copy(update={"upstreams": [engine], "cascade": cascade})
    async with Gateway(settings) as gateway, serving(gateway) as url:
        yield url


@pytest.fixture
async def sdk(base_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
        yield client


def check_entries(entries: list[ChatCompletionTokenLogprob], *, top: int) -> None:
    for entry in entries:
        assert entry.logprob <= 0
        assert bytes(entry.bytes or []).decode(errors="replace") == entry.token
        assert len(entry.top_logprobs) == top
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        # Greedy decoding picks the most likely token, which leads its alternatives.
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


async def test_chat_logprobs_whole_and_streamed(sdk: openai.AsyncOpenAI) -> None:
    asked: dict[str, Any] = {"temperature": 0, "max_tokens": 12, "logprobs": True,
                             "top_logprobs": 3}  # fmt: skip
    whole = await sdk.chat.completions.create(model="smollm2", messages=FRANCE, **asked)
    choice = whole.choices[0]
    assert choice.logprobs is not None
    assert choice.logprobs.content is not None
    entries = choice.logprobs.content
    assert whole.usage is not None
    assert len(entries) == whole.usage.completion_tokens
    assert "".join(e.token for e in entries) == choice.message.content
    check_entries(entries, top=3)
    stream = await sdk.chat.completions.create(model="smollm2", messages=FRANCE, stream=True,
                                               **asked)  # fmt: skip
    streamed: list[ChatCompletionTokenLogprob] = []
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            assert chunk.choices[0].logprobs is not None
            streamed += chunk.choices[0].logprobs.content or []
    assert text == choice.message.content
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries], abs=1e-4)
    plain = await sdk.chat.completions.create(model="smollm2", messages=FRANCE, temperature=0,
                                              max_tokens=12)  # fmt: skip
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == choice.message.content


async def test_a_stop_strings_tokens_carry_no_logprobs(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model="smollm2", messages=FRANCE, temperature=0, max_tokens=16, logprobs=True,
        stop=["Paris"],
    )  # fmt: skip
    text = reply.choices[0].message.content or ""
    assert reply.choices[0].logprobs is not None
    tokens = [e.token for e in reply.choices[0].logprobs.content or []]
    joined = "".join(tokens)
    # Tokens whose text was sent, at least in part: never one wholly inside the stop string.
    assert joined.startswith(text)
    assert "Paris" not in joined[: len(joined) - len(tokens[-1])] if tokens else True
    assert len(joined) - len(text) < (len(tokens[-1]) if tokens else 1)


async def test_prompt_lookup_decoding_scores_the_same_tokens(sdk: openai.AsyncOpenAI) -> None:
    asked: dict[str, Any] = {"temperature": 0, "max_tokens": 24, "logprobs": True}
    plain = await sdk.chat.completions.create(model="smollm2", messages=COPY, **asked)
    drafted = await sdk.chat.completions.create(model="smollm2-lookup", messages=COPY, **asked)
    a = plain.choices[0].logprobs.content or [] if plain.choices[0].logprobs else []
    b = drafted.choices[0].logprobs.content or [] if drafted.choices[0].logprobs else []
    assert [e.token for e in a] == [e.token for e in b]
    assert len(a) == 24
    # Verified drafts are scored from a batched step's rows: the same model, other float sums.
    assert [e.logprob for e in a] == pytest.approx([e.logprob for e in b], abs=0.05)


async def test_legacy_completion_logprobs(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.completions.create(model="smollm2", prompt="Bread is", max_tokens=6,
                                         temperature=0, logprobs=2)  # fmt: skip
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens is not None
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert len(logprobs.token_logprobs or []) == len(logprobs.tokens)
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs or [], strict=True):
        assert token in top  # the chosen token, beside up to 2 alternatives
        assert 2 <= len(top) <= 3
    offsets = logprobs.text_offset or []
    assert offsets == sorted(offsets)
    assert offsets[0] == 0
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.completions.create(model="smollm2", prompt="Bread", logprobs=6)
    assert refused.value.param == "logprobs"
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="smollm2", messages=FRANCE, top_logprobs=3)
    assert refused.value.param == "top_logprobs"


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_cascades_and_the_auto_route_on_the_embedded_default(
    sdk: openai.AsyncOpenAI, base_url: str
) -> None:
    create = sdk.chat.completions.with_raw_response.create
    ad_hoc = await create(model="cascade:smollm2>smollm2-lookup", messages=FRANCE, max_tokens=8)
    assert ad_hoc.headers["x-levergate-cascade"] in {"accepted", "escalated"}
    assert ad_hoc.parse().choices[0].logprobs is None  # asked by the cascade, not the client
    lenient = await create(model="lenient", messages=FRANCE, max_tokens=8)
    assert lenient.headers["x-levergate-cascade"] == "accepted"
    assert lenient.headers["x-levergate-cascade-alias"] == "smollm2"
    strict = await create(model="strict", messages=FRANCE, max_tokens=8)
    assert strict.headers["x-levergate-cascade"] == "escalated"
    assert strict.headers["x-levergate-cascade-alias"] == "smollm2-lookup"
    # `auto` is a route the embedded default ships, not a model name for the `*` alias.
    routed = await sdk.chat.completions.create(model="auto", messages=FRANCE, max_tokens=4)
    assert routed.model == "smollm2"
    tagged = await sdk.chat.completions.create(
        model="auto", messages=FRANCE, max_tokens=4,
        extra_headers={"x-levergate-feature": "extraction"},
    )  # fmt: skip
    assert tagged.model == "smollm2-lookup"
    async with httpx.AsyncClient() as http:
        text = (await http.get(base_url.removesuffix("/v1") + "/metrics")).text
    routed_to = "levergate_routed_requests_total"
    assert metric(text, routed_to, route="auto", chosen="smollm2", reason="default") == 1
    assert metric(text, routed_to, route="auto", chosen="smollm2-lookup", reason="extraction") == 1
    # Every cascade's first answer was judged on its logprobs (3 scores read).
    assert metric(text, "levergate_cascade_confidence_count") == 3
