"""CountUsage: a stream that reported no usage ends with one counted here, flagged; a stream that
reported it, a broken one and a whole answer pass unchanged. The flag survives each protocol's
own usage block and the ledger reads the output as counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from levergate.catalog import Catalog
from levergate.config import ModelSettings
from levergate.core.call import Call, Context, Kind
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.core.tokenizer import USAGE_SOURCE, TokenSource
from levergate.errors import UpstreamUnavailable
from levergate.layers.usage import CountUsage
from levergate.policies.pricing import from_usage
from levergate.protocol.anthropic.edge_answer import usage_of
from levergate.protocol.openai.prompt_tokens import Counter
from levergate.protocol.responses.answer import usage_from_chat
from levergate.protocol.tokens import Tiktoken, Tokenizers

QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


class _Shared:
    tokenizers = Tokenizers()
    catalog = Catalog.of_prices({})


def chunk(content: str | None = None, *, finish: str | None = None) -> Event:
    delta = {"content": content} if content is not None else {}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return Event.of({**HEAD, "choices": [choice]})


def upstream(*events: Event, fail: bool = False) -> Callable[[Call], Any]:
    async def answer(call: Call) -> Reply:
        async def source() -> EventSource:
            for event in events:
                yield event
            if fail:
                raise UpstreamUnavailable("cut", code="stream_interrupted")

        return Stream(source())

    return answer


def layer(inner: Callable[[Call], Any], *, alias: str = "gpt-4o-mini") -> CountUsage:
    return CountUsage(inner, model=ModelSettings(name=alias, upstream="u"), wanted="auto",
                      shared=_Shared(), image_tokens=765)  # type: ignore[arg-type]  # fmt: skip


def call_of(body: dict[str, Any], kind: Kind = "chat") -> Call:
    return Call(kind=kind, body={"stream": True, **body}, ctx=Context("r"))


async def events_of(reply: Reply) -> list[dict[str, Any]]:
    assert isinstance(reply, Stream)
    return [event.json() async for event in reply]


async def test_a_stream_without_usage_ends_with_a_counted_usage_chunk() -> None:
    answer = [chunk("Hello"), chunk(" world"), chunk(finish="stop")]
    body = {"model": "gpt-4o-mini", "messages": QUESTION}
    out = await events_of(await layer(upstream(*answer))(call_of(body)))
    assert out[:3] == [e.json() for e in answer]  # passed as they came
    o200k = Tiktoken("o200k_base")
    assert out[3] == {
        **HEAD,
        "choices": [],
        "usage": {
            "prompt_tokens": Counter(o200k).prompt(body).total,
            "completion_tokens": o200k.tokens("Hello world"),
            "total_tokens": Counter(o200k).prompt(body).total + o200k.tokens("Hello world"),
            USAGE_SOURCE: "counted",
        },
    }


async def test_a_model_without_a_known_tokenizer_is_estimated_and_says_so() -> None:
    answer = [chunk("Bonjour"), chunk(finish="stop")]
    body = {"model": "smollm2", "messages": QUESTION}
    out = await events_of(await layer(upstream(*answer), alias="smollm2")(call_of(body)))
    usage = out[-1]["usage"]
    assert usage[USAGE_SOURCE] == "estimated"
    assert usage["completion_tokens"] == 2  # 7 characters, 4 per token, rounded
    assert usage["prompt_tokens"] > 0


async def test_a_completions_prompt_of_token_ids_counts_them_as_they_are() -> None:
    text = Event.of({**HEAD, "object": "text_completion",
                     "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})  # fmt: skip
    body = {"model": "gpt-4o-mini", "prompt": [1, 2, 3, 4, 5]}
    out = await events_of(await layer(upstream(text))(call_of(body, "completion")))
    assert out[-1]["object"] == "text_completion"
    assert out[-1]["usage"]["prompt_tokens"] == 5


async def test_reported_usage_broken_streams_and_whole_answers_pass_unchanged() -> None:
    reported = Event.of({**HEAD, "choices": [], "usage": {"prompt_tokens": 3,
                                                          "completion_tokens": 1}})  # fmt: skip
    body = {"model": "gpt-4o-mini", "messages": QUESTION}
    out = await events_of(await layer(upstream(chunk("a"), reported))(call_of(body)))
    assert out == [chunk("a").json(), reported.json()]
    broken = await layer(upstream(chunk("a"), fail=True))(call_of(body))
    assert isinstance(broken, Stream)
    with pytest.raises(UpstreamUnavailable):
        [event async for event in broken]
    whole = Completed(data={"choices": []})

    async def answer(call: Call) -> Reply:
        return whole

    assert await layer(answer)(call_of(body)) is whole


def test_the_flag_survives_every_protocols_usage_and_the_ledger_reads_it() -> None:
    filled = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13,
              USAGE_SOURCE: "estimated"}  # fmt: skip
    assert usage_of(filled)[USAGE_SOURCE] == "estimated"
    assert usage_of(filled)["input_tokens"] == 9
    assert usage_from_chat(filled) == {
        "input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 13,
        USAGE_SOURCE: "estimated",
    }  # fmt: skip
    assert from_usage(filled).output_source is TokenSource.ESTIMATED
    reported = {"prompt_tokens": 9, "completion_tokens": 4}
    assert USAGE_SOURCE not in usage_of(reported)
    assert from_usage(reported).output_source is TokenSource.REPORTED
    # Only levergate's own values are read as the flag.
    assert from_usage({**reported, USAGE_SOURCE: "made up"}).output_source is TokenSource.REPORTED
