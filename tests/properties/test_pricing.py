"""Invariants of the cost ledger: costs are never negative, the usage conventions agree once
translated, a full cache hit saves exactly what the miss that filled it cost, and each lever's
saving is the difference between its counterfactual and what was paid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.catalog import Catalog
from levergate.config import PriceSettings
from levergate.core.call import Call, Context
from levergate.core.tokenizer import TokenSource
from levergate.layers.cache.entries import meta_origin, meta_usage, usage_meta
from levergate.layers.cache.entries import served as served_from
from levergate.layers.measure.ledger import Ledger
from levergate.policies.pricing import (
    Lever,
    Rates,
    Side,
    Tokens,
    bill,
    cost,
    from_anthropic,
    from_openai_chat,
    from_usage,
    prompt_cache_saving,
)

counts = st.integers(min_value=0, max_value=5_000_000)
price = st.floats(min_value=0, max_value=200, allow_nan=False, allow_infinity=False)
rates = st.builds(Rates, price, price, price, price, price, st.floats(min_value=0, max_value=1))


@st.composite
def buckets(draw: st.DrawFn) -> Tokens:
    written = draw(counts)
    return Tokens(draw(counts), draw(counts), written, draw(counts),
                  TokenSource.REPORTED, draw(st.integers(0, written)))  # fmt: skip


@st.composite
def anthropic_usage(draw: st.DrawFn) -> dict[str, object]:
    write_5m, write_1h = draw(counts), draw(counts)
    usage: dict[str, object] = {
        "input_tokens": draw(counts),
        "output_tokens": draw(counts),
        "cache_read_input_tokens": draw(counts),
        "cache_creation_input_tokens": write_5m + write_1h,
    }
    if draw(st.booleans()):
        usage["cache_creation"] = {
            "ephemeral_5m_input_tokens": write_5m,
            "ephemeral_1h_input_tokens": write_1h,
        }
    return usage


def translated(usage: dict[str, object]) -> dict[str, object]:
    """The Anthropic upstream's OpenAI-shaped usage (the contract in policies/pricing.py)."""
    read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    prompt = usage["input_tokens"]
    assert isinstance(read, int)
    assert isinstance(written, int)
    assert isinstance(prompt, int)
    shaped: dict[str, object] = {
        "prompt_tokens": prompt + read + written,
        "completion_tokens": usage["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }
    if "cache_creation" in usage:
        shaped["cache_creation"] = usage["cache_creation"]
    return shaped


@settings(max_examples=300, deadline=None)
@given(usage=anthropic_usage(), at=rates, batch=st.booleans())
def test_costs_are_never_negative_and_conventions_agree(
    usage: dict[str, object], at: Rates, batch: bool
) -> None:
    native, shaped = from_anthropic(usage), from_openai_chat(translated(usage))
    assert native == shaped
    assert from_usage(usage) == native
    paid = bill(tokens=native, rates=at, batch=batch)
    assert paid.cost_usd >= 0
    assert cost(native, at) >= 0


@settings(max_examples=300, deadline=None)
@given(tokens=buckets(), at=rates)
def test_the_prompt_cache_saving_is_the_price_of_the_same_prompt_uncached_minus_the_paid(
    tokens: Tokens, at: Rates
) -> None:
    uncached = Tokens(tokens.input, 0, 0, tokens.output)
    expected = cost(uncached, at) - cost(tokens, at)
    assert abs(prompt_cache_saving(tokens, at) - expected) <= 1e-9 * max(1.0, abs(expected))


@settings(max_examples=300, deadline=None)
@given(
    tokens=buckets(),
    at=rates,
    default=rates,
    cheap=st.floats(min_value=0, max_value=100),
)
def test_a_route_saving_plus_what_was_paid_is_the_default_models_cost(
    tokens: Tokens, at: Rates, default: Rates, cheap: float
) -> None:
    paid = bill(tokens=tokens, rates=at, default=default, side=(Side("c", "cascade", cheap),))
    counterfactual = paid.savings.get(Lever.ROUTE, 0.0) + paid.cost_usd
    assert abs(counterfactual - cost(tokens, default)) <= 1e-9 * max(1.0, counterfactual)


@settings(max_examples=300, deadline=None)
@given(
    usage=st.one_of(anthropic_usage(), anthropic_usage().map(translated)),
    price=st.builds(
        PriceSettings,
        input=price,
        output=price,
        cache_read=price,
        cache_write=price,
        cache_write_1h=price,
    ),
)
def test_a_full_cache_hit_saves_exactly_what_the_miss_that_filled_it_cost(
    usage: dict[str, object], price: PriceSettings
) -> None:
    ledger = Ledger(Catalog.of_prices({"m": price}))
    # Asked for "auto" (a route's alias, no price of its own), answered by "m".
    miss = Call("chat", {"model": "auto"}, Context("miss"))
    miss.ctx.trace.alias = "m"
    tokens = from_usage(usage)
    paid = ledger.bill(miss, tokens, usage).cost_usd
    # The entry keeps the buckets and what answered in its meta; the hit reads them back.
    hit = Call("chat", {"model": "auto"}, Context("hit"))
    hit.ctx.trace.cache = served_from("exact", usage_meta(usage, alias="m"))
    served = ledger.bill(hit, Tokens(output_source=TokenSource.NONE), None)
    assert served.cost_usd == 0
    assert abs(served.savings.get(Lever.EXACT, 0.0) - paid) <= 1e-9 * max(1.0, paid)


@settings(max_examples=200, deadline=None)
@given(usage=anthropic_usage(), alias=st.text(max_size=40), model=st.text(max_size=80))
def test_an_entry_keeps_what_answered_it_whatever_the_names(
    usage: dict[str, object], alias: str, model: str
) -> None:
    # Model names behind `*` come from the client's body: commas, newlines, quotes, anything.
    meta = usage_meta(usage, alias=alias, model=model)
    assert meta_usage(meta) == meta_usage(usage_meta(usage))
    assert meta_origin(meta) == (alias, model)


@given(meta=st.binary(max_size=200))
def test_any_meta_bytes_read_as_counts_and_an_origin_never_an_error(meta: bytes) -> None:
    assert len(meta_usage(meta)) == 5
    alias, model = meta_origin(meta)
    assert isinstance(alias, str)
    assert isinstance(model, str)


@given(tokens=buckets(), at=rates, served=rates, default=rates)
def test_tier_and_route_savings_add_up_to_the_default_models_standard_cost(
    tokens: Tokens, at: Rates, served: Rates, default: Rates
) -> None:
    """The tier lever is standard minus what the serving tier cost; the route lever, at
    standard rates on both sides: together, the default model at standard minus what was paid."""
    priced = bill(tokens=tokens, rates=at, tier=served, default=default)
    assert priced.cost_usd == pytest.approx(cost(tokens, served))
    together = priced.savings.get(Lever.TIER, 0.0) + priced.savings.get(Lever.ROUTE, 0.0)
    assert together == pytest.approx(cost(tokens, default) - priced.cost_usd, abs=1e-9)
