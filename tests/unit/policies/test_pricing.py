"""Golden tests of the pricing module: each provider's usage convention read into four buckets,
priced, and each lever's saving against its counterfactual. The numbers are worked by hand in
the comments (prices in $ per million tokens, so N tokens at $P cost N * P / 1e6)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.tokenizer import TokenSource
from levergate.policies.pricing import (
    Rates,
    Side,
    Tokens,
    bill,
    cost,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    from_usage,
    prompt_cache_saving,
)

# gpt-4o's published prices: $2.50 in, $1.25 cached, $10 out, batch 50% off.
GPT_4O = Rates(input=2.5, output=10.0, cache_read=1.25, cache_write=2.5, cache_write_1h=2.5,
               batch_discount=0.5)  # fmt: skip
# Claude Sonnet 4.5: $3 in, $15 out, reads $0.30, 5-minute writes $3.75, 1-hour writes $6.
SONNET = Rates(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75, cache_write_1h=6.0,
               batch_discount=0.5)  # fmt: skip
# gpt-4o-mini: $0.15 in, $0.075 cached, $0.60 out.
MINI = Rates(input=0.15, output=0.6, cache_read=0.075, cache_write=0.15, cache_write_1h=0.15)
REPORTED = TokenSource.REPORTED


def test_openai_chat_counts_cached_tokens_inside_prompt_tokens() -> None:
    usage = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
             "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}  # fmt: skip
    tokens = from_openai_chat(usage)
    # 2006 prompt = 86 uncached + 1920 cached.
    assert tokens == Tokens(86, 1920, 0, 300, REPORTED)
    # 86 x 2.50 = 215; 1920 x 1.25 = 2400; 300 x 10 = 3000 -> 5615 / 1e6 = $0.005615
    assert cost(tokens, GPT_4O) == pytest.approx(0.005615)


def test_openai_chat_cache_writes_are_inside_prompt_tokens_too() -> None:
    details = {"cached_tokens": 1000, "cache_write_tokens": 3000}
    usage = {"prompt_tokens": 5000, "completion_tokens": 10, "prompt_tokens_details": details}
    # 5000 = 1000 uncached + 1000 read + 3000 written.
    assert from_openai_chat(usage) == Tokens(1000, 1000, 3000, 10, REPORTED)


def test_the_anthropic_upstreams_openai_shaped_usage_splits_writes_by_ttl() -> None:
    """The contract with the Anthropic upstream: prompt_tokens = input + cache_read +
    cache_creation, cached_tokens = cache_read, Anthropic's own fields kept beside."""
    usage = {"prompt_tokens": 100 + 4000 + 2500, "completion_tokens": 200,
             "prompt_tokens_details": {"cached_tokens": 4000},
             "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 2500,
             "cache_creation": {"ephemeral_5m_input_tokens": 500,
                                "ephemeral_1h_input_tokens": 2000}}  # fmt: skip
    tokens = from_openai_chat(usage)
    assert tokens == Tokens(100, 4000, 2500, 200, REPORTED, cache_write_1h=2000)
    # 100 x 3 = 300; 4000 x 0.30 = 1200; 500 x 3.75 = 1875; 2000 x 6 = 12000; 200 x 15 = 3000
    # -> 18375 / 1e6
    assert cost(tokens, SONNET) == pytest.approx(0.018375)


def test_anthropic_input_tokens_exclude_cache_reads_and_writes() -> None:
    usage = {"input_tokens": 100, "output_tokens": 200, "cache_read_input_tokens": 4000,
             "cache_creation_input_tokens": 2500,
             "cache_creation": {"ephemeral_5m_input_tokens": 500,
                                "ephemeral_1h_input_tokens": 2000}}  # fmt: skip
    tokens = from_anthropic(usage)
    # The same request as above, in Anthropic's own convention: the same buckets, the same $.
    assert tokens == Tokens(100, 4000, 2500, 200, REPORTED, cache_write_1h=2000)
    assert tokens.input == 6600
    assert cost(tokens, SONNET) == pytest.approx(0.018375)
    assert from_usage(usage) == tokens


def test_anthropic_writes_without_a_ttl_split_are_five_minute_writes() -> None:
    usage = {"input_tokens": 50, "output_tokens": 10, "cache_creation_input_tokens": 1000}
    tokens = from_anthropic(usage)
    # 50 x 3 = 150; 1000 x 3.75 = 3750; 10 x 15 = 150 -> 4050 / 1e6
    assert cost(tokens, SONNET) == pytest.approx(0.00405)


def test_responses_input_tokens_include_the_cached_ones() -> None:
    usage = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1024},
             "output_tokens": 100, "output_tokens_details": {"reasoning_tokens": 40},
             "total_tokens": 1600}  # fmt: skip
    tokens = from_openai_responses(usage)
    assert tokens == Tokens(476, 1024, 0, 100, REPORTED)
    # 476 x 0.15 = 71.4; 1024 x 0.075 = 76.8; 100 x 0.6 = 60 -> 208.2 / 1e6
    assert cost(tokens, MINI) == pytest.approx(0.0002082)
    assert from_usage(usage) == tokens


def test_hostile_usage_never_makes_a_negative_bucket() -> None:
    # cached > prompt, strings, booleans, negatives: each bucket stays within the prompt.
    assert from_openai_chat({"prompt_tokens": 10, "completion_tokens": 1,
                             "prompt_tokens_details": {"cached_tokens": 50}}) == Tokens(
        0, 10, 0, 1, REPORTED)  # fmt: skip
    assert from_usage({"prompt_tokens": "9", "completion_tokens": True}) == Tokens()
    assert from_anthropic({"input_tokens": -5, "output_tokens": 3}) == Tokens(0, 0, 0, 3, REPORTED)
    assert from_usage(None) == Tokens()


def test_embeddings_usage_has_no_output() -> None:
    tokens = from_usage({"prompt_tokens": 8, "total_tokens": 8})
    assert tokens == Tokens(8, 0, 0, 0, TokenSource.NONE)


def test_prompt_cache_saving_is_net_of_the_write_premium() -> None:
    # Reads: 4000 x (3 - 0.30) = 10800. Writes: 500 x (3.75 - 3) = 375 and
    # 2000 x (6 - 3) = 6000. Net 10800 - 6375 = 4425 / 1e6.
    tokens = Tokens(100, 4000, 2500, 200, REPORTED, cache_write_1h=2000)
    assert prompt_cache_saving(tokens, SONNET) == pytest.approx(0.004425)
    # A request that only wrote: 1000 x (3.75 - 3) = 750 / 1e6 more than without the cache.
    assert prompt_cache_saving(Tokens(0, 0, 1000, 0), SONNET) == pytest.approx(-0.00075)


def test_a_routed_request_saves_the_default_models_cost_minus_its_own() -> None:
    tokens = Tokens(1000, 0, 0, 500, REPORTED)
    # Answered by gpt-4o-mini: 1000 x 0.15 + 500 x 0.6 = 450 -> $0.00045.
    # gpt-4o on the same tokens: 1000 x 2.5 + 500 x 10 = 7500 -> $0.0075. Saved $0.00705.
    result = bill(tokens=tokens, rates=MINI, default=GPT_4O)
    assert result.cost_usd == pytest.approx(0.00045)
    assert result.savings == {"route": pytest.approx(0.00705)}


def test_an_escalated_cascade_saves_a_negative_amount() -> None:
    tokens = Tokens(1000, 0, 0, 500, REPORTED)
    # The strong model answered ($0.0075, as the default would have); the cheap attempt cost
    # 1000 x 0.15 + 200 x 0.6 = 270 -> $0.00027, added to the cost and taken off the saving.
    side = (Side("mini", "cascade", 0.00027),)
    result = bill(tokens=tokens, rates=GPT_4O, default=GPT_4O, side=side)
    assert result.cost_usd == pytest.approx(0.0075 + 0.00027)
    assert result.answer_usd == pytest.approx(0.0075)
    assert result.savings == {"route": pytest.approx(-0.00027)}


def test_trimmed_tokens_save_the_input_price_minus_the_summary() -> None:
    # 3000 tokens not sent to gpt-4o: 3000 x 2.5 = 7500 -> $0.0075; the summary by mini cost
    # $0.0001, so the trim saved $0.0074 net.
    tokens = Tokens(1000, 0, 0, 100, REPORTED)
    result = bill(tokens=tokens, rates=GPT_4O, trimmed=3000,
                  side=(Side("mini", "summary", 0.0001),))  # fmt: skip
    assert result.savings == {"trim": pytest.approx(0.0074)}
    # 1000 x 2.5 + 100 x 10 = 3500 -> $0.0035, plus the summary.
    assert result.cost_usd == pytest.approx(0.0036)


def test_a_batched_request_is_priced_at_the_discount_and_other_levers_at_what_was_paid() -> None:
    tokens = Tokens(1000, 1000, 0, 100, REPORTED)
    # Full: 1000 x 2.5 + 1000 x 1.25 + 100 x 10 = 4750 -> $0.00475; half that paid.
    result = bill(tokens=tokens, rates=GPT_4O, batch=True)
    assert result.cost_usd == pytest.approx(0.002375)
    # batch saved 0.002375; the prompt cache 1000 x (1.25 - 0.625) = 625 -> $0.000625.
    assert result.savings == {
        "batch": pytest.approx(0.002375),
        "prompt_cache": pytest.approx(0.000625),
    }


def test_a_plain_request_saves_nothing() -> None:
    result = bill(tokens=Tokens(10, 0, 0, 10, REPORTED), rates=GPT_4O)
    assert result.savings == {}
    assert result.side == ()


def _counted(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def _openai_chat_as_written_first(usage: dict[str, Any]) -> Tokens:
    """`from_openai_chat` as first written (before its helpers were inlined): the oracle."""
    prompt = _counted(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = written = 0
    if isinstance(details, dict):
        cached = _counted(details.get("cached_tokens"))
        written = _counted(details.get("cache_write_tokens"))
    if not written:
        written = _counted(usage.get("cache_creation_input_tokens"))
    cached = min(cached, prompt)
    written = min(written, prompt - cached)
    completion = usage.get("completion_tokens")
    creation = usage.get("cache_creation")
    hour = _counted(creation.get("ephemeral_1h_input_tokens")) if isinstance(creation, dict) else 0
    return Tokens(prompt - cached - written, cached, written, _counted(completion),
                  REPORTED if type(completion) is int else TokenSource.NONE,
                  min(written, hour) if written else 0)  # fmt: skip


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5_000), st.floats(-1, 10),
                    st.text(max_size=3))  # fmt: skip


_DETAILS = st.fixed_dictionaries({}, optional={"cached_tokens": _VALUES,
                                                "cache_write_tokens": _VALUES})  # fmt: skip
_CREATION = st.fixed_dictionaries({}, optional={"ephemeral_1h_input_tokens": _VALUES})
_USAGE = st.fixed_dictionaries({}, optional={
    "prompt_tokens": _VALUES, "completion_tokens": _VALUES, "cache_creation_input_tokens": _VALUES,
    "prompt_tokens_details": st.one_of(_VALUES, _DETAILS),
    "cache_creation": st.one_of(_VALUES, _CREATION),
})  # fmt: skip


@given(_USAGE)
def test_openai_chat_usage_of_any_shape_reads_as_it_always_did(usage: dict[str, Any]) -> None:
    """Any usage block, hostile values included (booleans, negatives, floats, strings, a
    details field that is not an object): the same four buckets and source as before."""
    tokens = from_openai_chat(usage)
    assert tokens == _openai_chat_as_written_first(usage)
    assert min(tokens[:4]) >= 0
