"""The trim section: clear errors at start-up for names that do not resolve or values that
make no sense."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import Settings
from levergate.errors import ConfigError

BASE: dict[str, Any] = {
    "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:1/v1"}],
    "models": [{"name": "big", "upstream": "u"}, {"name": "mini", "upstream": "u"}],
}


def load(**rule: Any) -> Settings:
    return Settings.load(**BASE, trim={"models": {"big": rule}})


def test_a_valid_rule_loads() -> None:
    settings = load(budget=1000, summary_model="mini", tokenizer="o200k_base", max_tokens=10)
    assert settings.trim.models["big"].budget == 1000


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"summary_model": "nope"}, "unknown summary_model 'nope'"),
        ({"tokenizer": "sentencepiece"}, "unknown tokenizer"),
        ({"tokenizer": "hf:/no/such/tokenizer.json"}, "no file at"),
        ({"budget": 0}, "greater than or equal to 1"),
        ({"budget": -5}, "greater than or equal to 1"),
        ({"max_tokens": 10, "default_max_tokens": 20}, "default_max_tokens is above max_tokens"),
        ({"over_max_tokens": "ignore"}, "over_max_tokens"),
    ],
)
def test_bad_rules_are_config_errors(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(**rule)


def test_an_unknown_alias_and_a_bad_marker_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown model alias 'bgi'"):
        Settings.load(**BASE, trim={"models": {"bgi": {"budget": 5}}})
    with pytest.raises(ConfigError, match="marker"):
        Settings.load(**BASE, trim={"marker": "{count} cut"})
