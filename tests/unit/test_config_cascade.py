"""Cascade configuration errors are clear at start-up, naming the cascade."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import Settings
from levergate.errors import ConfigError

BASE: dict[str, Any] = {
    "upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"name": "small", "upstream": "u"}, {"name": "large", "upstream": "u"},
               {"name": "*", "upstream": "u"}],
}  # fmt: skip


def load(cascade: dict[str, Any]) -> Settings:
    return Settings.load(**BASE, cascade=cascade)


def named(steps: list[str], checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"cascades": [{"name": "qa", "steps": steps, "checks": checks or [{"kind": "json"}]}]}


def test_a_valid_named_cascade_loads() -> None:
    settings = load(named(["small", "large"], [{"kind": "judge", "alias": "large"}]))
    assert settings.cascade.cascades[0].steps == ["small", "large"]


@pytest.mark.parametrize(
    ("cascade", "message"),
    [
        (named(["small", "ghost"]), "cascade 'qa': unknown model alias 'ghost'"),
        (named(["small", "*"]), "unknown model alias '*'"),  # the catch-all is not a model
        (named(["small"]), "at least 2 items"),
        (named(["small", "large", "small", "large", "small"]), "cascade.max_steps is 4"),
        (named(["small", "small"]), "names a step twice"),
        (named(["small", "large"], [{"kind": "judge", "alias": "ghost"}]), "unknown judge"),
        (named(["small", "large"], [{"kind": "json_schema", "schema": {"type": 3}}]),
         "invalid JSON schema"),
        (named(["small", "large"], [{"kind": "regex", "pattern": "[a"}]), "invalid regex"),
        (named(["small", "large"], [{"kind": "telepathy"}]),
         "does not match any of the expected tags"),
        ({"cascades": [{"name": "small", "steps": ["small", "large"],
                        "checks": [{"kind": "json"}]}]}, "has the name of a model alias"),
        ({"checks": [{"kind": "judge", "alias": "ghost"}]}, "unknown judge alias 'ghost'"),
    ],
)  # fmt: skip
def test_configuration_errors(cascade: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as caught:
        load(cascade)
    assert message in str(caught.value)
