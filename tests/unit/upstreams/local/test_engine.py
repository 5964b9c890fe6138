"""The engine on the real bundled model (SmolLM2-135M): answers, usage, streaming, prefix
reuse, batching, speculation, cancellation and the 400s. Greedy decoding throughout, so every
comparison is exact; no timing is asserted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from levergate.core.call import Call
from levergate.core.reply import Completed, Stream
from levergate.errors import BadRequest
from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.sequence import Draft
from tests.unit.upstreams.local.helpers import (
    SYSTEM,
    answer,
    chat_call,
    generate,
    local_settings,
    running,
    streamed,
)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    yield from running(local_settings())


async def test_a_chat_answer_with_usage(endpoint: LocalEndpoint) -> None:
    data = await answer(endpoint, chat_call("What is the capital of France?", max_tokens=24))
    assert data["object"] == "chat.completion"
    assert "Paris" in data["choices"][0]["message"]["content"]
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["prompt_tokens"] > 5
    assert 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_the_stream_carries_the_same_answer_in_chunks(endpoint: LocalEndpoint) -> None:
    call = chat_call("Name three colours.", max_tokens=20)
    whole = await answer(endpoint, call)
    chunks = await streamed(endpoint, call)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]


async def test_max_tokens_and_stop_strings_end_the_answer(endpoint: LocalEndpoint) -> None:
    capped = await answer(endpoint, chat_call("Count from 1 to 50.", max_tokens=5))
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 5
    full = await answer(endpoint, chat_call("Count from 1 to 20, comma separated.", max_tokens=40))
    text = full["choices"][0]["message"]["content"]
    assert "5" in text
    stopped = await answer(
        endpoint, chat_call("Count from 1 to 20, comma separated.", max_tokens=40, stop=["5"])
    )
    assert stopped["choices"][0]["message"]["content"] == text[: text.index("5")]
    assert stopped["choices"][0]["finish_reason"] == "stop"


async def test_a_shared_prefix_is_reused_and_changes_nothing(endpoint: LocalEndpoint) -> None:
    question = "When does the bakery open, and what does a croissant cost?"
    cold = await answer(endpoint, chat_call(question, system=SYSTEM, max_tokens=24))
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    other = await answer(endpoint, chat_call("Do you sell rye?", system=SYSTEM, max_tokens=8))
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] > 200
    warm = await answer(endpoint, chat_call(question, system=SYSTEM, max_tokens=24))
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == (
        warm["usage"]["prompt_tokens"] - 1
    )
    assert warm["choices"] == cold["choices"]


async def test_concurrent_requests_answer_as_they_would_alone(endpoint: LocalEndpoint) -> None:
    # Batched steps add up floats in another order than lone ones, so a near-tie between two
    # tokens may rarely flip: the questions have clear answers, and any cross-talk between
    # sequences (positions, cells, sampling) would change all of them.
    questions = ["What is the capital of France?", "What is 2 + 2?",
                 "What is the capital of Japan?", "How many days are in a week?",
                 "What is the opposite of hot?", "What is the largest planet?"]  # fmt: skip
    alone = [await answer(endpoint, chat_call(q, max_tokens=8)) for q in questions]
    together = await asyncio.gather(
        *[answer(endpoint, chat_call(q, max_tokens=8)) for q in questions]
    )
    for one, other in zip(alone, together, strict=True):
        assert one["choices"][0]["message"] == other["choices"][0]["message"]


async def test_speculative_output_equals_greedy_token_for_token(endpoint: LocalEndpoint) -> None:
    source = (
        "Order 1182: two sourdough loaves, one lemon tart, six chocolate chip cookies, "
        "delivered to 14 Baker Street on Friday at nine."
    )
    prompt = (
        f"<|im_start|>user\nCopy this text exactly:\n{source}<|im_end|>\n<|im_start|>assistant\n"
    )
    before = endpoint.engine.stats.accepted_tokens
    plain, plain_end = await generate(endpoint, prompt, max_tokens=48)
    draft = Draft(ngram_min=1, ngram_max=3, tokens=8)
    fast, fast_end = await generate(endpoint, prompt, max_tokens=48, draft=draft)
    assert fast == plain
    assert fast_end.reason == plain_end.reason
    assert fast_end.drafted > 0
    assert fast_end.accepted > 0
    assert endpoint.engine.stats.accepted_tokens > before


async def test_closing_a_stream_frees_its_slot(endpoint: LocalEndpoint) -> None:
    reply = await endpoint(chat_call("Write a long story about a dragon.", max_tokens=400,
                                     stream=True))  # fmt: skip
    assert isinstance(reply, Stream)
    events = aiter(reply)
    await anext(events)
    await anext(events)
    await reply.aclose()
    for _ in range(200):
        if not endpoint.engine.scheduler.active:
            break
        await asyncio.sleep(0.02)
    assert not endpoint.engine.scheduler.active
    assert endpoint.engine.scheduler.reserved == 0


async def test_a_prompt_longer_than_the_context_is_a_400(endpoint: LocalEndpoint) -> None:
    with pytest.raises(BadRequest) as raised:
        await endpoint(chat_call("word " * 5000))
    assert raised.value.code == "context_length_exceeded"
    with pytest.raises(BadRequest) as raised:
        await endpoint(chat_call("hi", max_tokens=5000))
    assert raised.value.code == "context_length_exceeded"
    # The engine is unharmed.
    assert (await answer(endpoint, chat_call("Say yes.", max_tokens=4)))["choices"]


async def test_text_completions(endpoint: LocalEndpoint) -> None:
    call = chat_call("unused", max_tokens=8)
    body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 8,
            "temperature": 0}  # fmt: skip
    reply = await endpoint(Call(kind="completion", body=body, ctx=call.ctx))
    assert isinstance(reply, Completed)
    data = reply.data
    assert data["object"] == "text_completion"
    assert data["choices"][0]["text"]
