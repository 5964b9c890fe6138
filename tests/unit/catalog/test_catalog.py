"""The model catalog: the shipped table is valid and dated, aliases find their entries, config
overrides field by field, and bad entries are clear start-up errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from levergate.catalog import Catalog, builtin_entries, builtin_meta
from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.policies.pricing import FREE
from levergate.policies.tiers import Tier

UP = [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}]


def settings(*models: dict[str, Any], **values: Any) -> Settings:
    return Settings.load(upstreams=UP, models=list(models), **values)


def test_the_shipped_table_is_dated_sourced_and_every_entry_priced() -> None:
    meta = builtin_meta()
    assert meta["checked"] == "2026-12-01"
    entries = builtin_entries()
    providers = {e.provider for e in entries.values()}
    assert providers == {"openai", "anthropic", "google"}
    assert providers <= set(meta["sources"])
    for name, entry in entries.items():
        assert entry.price.input is not None, name
        assert entry.price.output is not None, name
        assert entry.context_window, name
    # Spot checks against the providers' pages (see the file's header).
    assert entries["gpt-4o"].price.cache_read == 1.25
    sonnet = entries["claude-sonnet-4-5"].price
    assert (sonnet.cache_write, sonnet.cache_write_1h, sonnet.cache_read) == (3.75, 6.0, 0.3)


def test_an_alias_finds_its_entry_by_upstream_model_name_or_explicit_catalog() -> None:
    catalog = Catalog.build(settings(
        {"name": "smart", "upstream": "up", "upstream_model": "claude-sonnet-4-5-20250929"},
        {"name": "gpt-4.1-mini", "upstream": "up"},
        {"name": "azure", "upstream": "up", "upstream_model": "my-deployment", "catalog": "gpt-4o"},
        {"name": "routed", "upstream": "up", "upstream_model": "openai/gpt-4o-mini-2024-07-18"},
    ))  # fmt: skip
    smart = catalog.spec("smart")
    assert (smart.name, smart.provider, smart.context_window) == (
        "claude-sonnet-4-5",
        "anthropic",
        200_000,
    )
    assert smart.rates.cache_write_1h == 6.0
    assert catalog.spec("gpt-4.1-mini").max_output == 32_768
    assert catalog.spec("azure").rates.input == 2.5
    routed = catalog.spec("routed")
    assert routed.name == "gpt-4o-mini"
    assert routed.tokenizer == "o200k_base"
    assert routed.capabilities.logprobs
    assert not catalog.spec("smart").capabilities.logprobs


def test_config_entries_and_alias_prices_override_field_by_field() -> None:
    catalog = Catalog.build(settings(
        {"name": "a", "upstream": "up", "upstream_model": "gpt-4o"},
        {"name": "b", "upstream": "up", "upstream_model": "gpt-4o", "price": {"output": 9.0}},
        {"name": "tuned", "upstream": "up", "upstream_model": "ft:mine"},
        catalog={"gpt-4o": {"price": {"input": 2.0}, "max_output": 4096},
                 "ft:mine": {"provider": "openai", "price": {"input": 3, "output": 12},
                             "context_window": 65536}},
    ))  # fmt: skip
    a, b = catalog.spec("a"), catalog.spec("b")
    # input from the config entry; cached and output from the built-in table.
    assert (a.rates.input, a.rates.cache_read, a.rates.output) == (2.0, 1.25, 10.0)
    assert (a.context_window, a.max_output) == (128_000, 4096)
    assert (b.rates.input, b.rates.output) == (2.0, 9.0)
    tuned = catalog.spec("tuned")
    # A new entry: cache reads and writes default to the input price (no discount assumed).
    assert tuned.rates == tuned.rates._replace(input=3.0, output=12.0, cache_read=3.0,
                                              cache_write=3.0, cache_write_1h=3.0)  # fmt: skip
    assert tuned.context_window == 65536


def test_an_entry_without_prices_used_by_an_alias_stops_start_up() -> None:
    bad = settings({"name": "local", "upstream": "up", "catalog": "llama"},
                   catalog={"llama": {"context_window": 8192}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"model 'local'.*'llama' has no prices"):
        Catalog.build(bad)
    with pytest.raises(ConfigError, match="has no prices"):
        Gateway(bad)  # the gateway refuses to start
    # The same entry priced (self-hosted: free) is fine.
    free = {"context_window": 8192, "price": {"input": 0, "output": 0}}
    ok = settings({"name": "local", "upstream": "up", "catalog": "llama"}, catalog={"llama": free})
    assert Catalog.build(ok).spec("local").context_window == 8192


def test_a_half_price_and_an_unknown_entry_are_start_up_errors() -> None:
    with pytest.raises(ConfigError, match=r"model 'x'.*price needs output"):
        Catalog.build(settings({"name": "x", "upstream": "up", "price": {"input": 1.0}}))
    with pytest.raises(ConfigError, match=r"catalog entry 'nope' is not in the catalog"):
        Catalog.build(settings({"name": "x", "upstream": "up", "catalog": "nope"}))


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ConfigError, match="prise"):
        settings(catalog={"m": {"prise": {"input": 1}}})
    with pytest.raises(ConfigError, match="cache_reed"):
        settings({"name": "x", "upstream": "up", "price": {"input": 1, "cache_reed": 1}})


def test_an_alias_with_no_entry_and_no_price_is_unpriced_and_named_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="levergate.catalog"):
        catalog = Catalog.build(settings({"name": "sim", "upstream": "up"}))
    assert not catalog.spec("sim").priced
    assert catalog.rates("sim") == FREE
    assert "unpriced model aliases" in caplog.text
    assert "sim" in caplog.text


def test_the_wildcard_prices_each_model_it_sends_by_its_name() -> None:
    catalog = Catalog.build(settings(
        {"name": "*", "upstream": "up", "price": {"output": 1.0}},
    ))  # fmt: skip
    mini = catalog.rates("*", "gpt-4o-mini")
    # The catalog's input price, the wildcard's own output price over it.
    assert (mini.input, mini.output) == (0.15, 1.0)
    assert catalog.rates("*", "claude-3-5-haiku-latest").input == 0.8
    # A name not in the catalog: the wildcard's own (partial, so unpriced) price.
    assert catalog.rates("*", "who-knows") == FREE
    assert catalog.spec("gpt-4o-mini").context_window == 128_000


def test_the_builtin_table_can_be_turned_off() -> None:
    catalog = Catalog.build(settings({"name": "gpt-4o", "upstream": "up"},
                                     ledger={"builtin_catalog": False}))  # fmt: skip
    assert not catalog.spec("gpt-4o").priced


def test_names_clients_invent_behind_the_wildcard_are_not_remembered_without_bound() -> None:
    catalog = Catalog.build(settings({"name": "*", "upstream": "up"}))
    for n in range(5000):
        assert catalog.rates("*", f"vendor{n}/gpt-4o-2024-01-{n % 28 + 1:02d}").input == 2.5
    assert len(catalog._dynamic) <= catalog._dynamic_cap < 5000


def test_names_the_catalog_lacks_are_remembered_apart_and_within_bound() -> None:
    """A name no entry has is looked up once (then remembered as the fallback's), and made-up
    names fill their own bounded set, never the room kept for the entries' spellings."""
    catalog = Catalog.build(settings({"name": "*", "upstream": "up"}))
    assert catalog.rates("*", "my-local-model") == catalog.rates("*", "my-local-model") == FREE
    assert "my-local-model" in catalog._unlisted
    for n in range(5000):
        assert catalog.rates("*", f"made-up-{n}") == FREE
    assert len(catalog._unlisted) <= catalog._dynamic_cap < 5000
    assert catalog.rates("*", "gpt-4o").input == 2.5
    assert "gpt-4o" in catalog._dynamic


def test_service_tier_prices_are_sourced_and_flex_is_the_batch_rate() -> None:
    """OpenAI bills flex "at Batch API rates": each flex price is half the standard one."""
    assert {"openai_flex", "openai_priority", "groq_flex", "anthropic_tiers"} <= set(
        builtin_meta()["sources"]
    )
    entries = builtin_entries()
    flexed = {name for name, e in entries.items() if e.price.flex is not None}
    assert flexed == {"gpt-5", "gpt-5-mini", "gpt-5-nano", "o3", "o4-mini"}
    for name in flexed:
        price = entries[name].price
        assert price.flex is not None
        assert price.batch_discount == 0.5
        assert (price.flex.input, price.flex.output) == pytest.approx(
            (price.input * 0.5, price.output * 0.5)  # type: ignore[operator]
        )
    gpt5 = entries["gpt-5"].price.priority
    assert gpt5 is not None
    assert (gpt5.input, gpt5.output, gpt5.cache_read) == (2.5, 20.0, 0.25)
    assert all(e.price.flex is None and e.price.priority is None
               for e in entries.values() if e.provider == "anthropic")  # fmt: skip


def test_tier_prices_resolve_override_and_stay_unpriced_where_not_sold() -> None:
    catalog = Catalog.build(settings(
        {"name": "mini", "upstream": "up", "upstream_model": "gpt-5-mini"},
        {"name": "mine", "upstream": "up", "upstream_model": "gpt-5-mini",
         "price": {"flex": {"input": 0.1}}},
        {"name": "4o", "upstream": "up", "upstream_model": "gpt-4o"},
    ))  # fmt: skip
    flex = catalog.tier_rates("mini", Tier.FLEX)
    assert flex is not None
    assert (flex.input, flex.output, flex.cache_read) == (0.125, 1.0, 0.0125)
    mine = catalog.tier_rates("mine", Tier.FLEX)
    assert mine is not None
    assert (mine.input, mine.output) == (0.1, 1.0)
    assert catalog.tier_rates("4o", Tier.FLEX) is None
    assert catalog.tier_rates("4o", Tier.PRIORITY) is not None
    assert catalog.tier_rates("4o", Tier.BATCH) == catalog.rates("4o").batched()
    with pytest.raises(ConfigError, match=r"flex tier.*output"):
        Catalog.build(
            settings(
                {
                    "name": "x",
                    "upstream": "up",
                    "price": {"input": 1, "output": 2, "flex": {"input": 0.5}},
                }
            )
        )
