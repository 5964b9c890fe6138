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
        ({"shadow": {"rate": 1.5}}, "shadow.rate"),
        ({"shadow": {"rate": -0.1}}, "shadow.rate"),
        ({"shadow": {"queue": 0}}, "shadow.queue"),
        ({"shadow": {"concurrency": 1000}}, "shadow.concurrency"),
        ({"shadow": {"compare": "judge"}}, "needs shadow.judge"),
        ({"shadow": {"judge": "large"}}, "only asked with shadow.compare 'judge'"),
        ({"shadow": {"compare": "judge", "judge": "ghost"}},
         "cascade.shadow: unknown judge alias 'ghost'"),
        ({"cascades": [{**named(["small", "large"])["cascades"][0],
                        "shadow": {"rate": 1, "compare": "judge", "judge": "ghost"}}]},
         "cascade 'qa': unknown shadow judge alias 'ghost'"),
        # The queue is the gateway's: a named cascade sets only how it is sampled.
        ({"cascades": [{**named(["small", "large"])["cascades"][0], "shadow": {"queue": 4}}]},
         "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_configuration_errors(cascade: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as caught:
        load(cascade)
    assert message in str(caught.value)


def test_shadow_sampling_is_off_by_default_and_a_named_cascade_may_override_it() -> None:
    assert not load({}).cascade.shadowed
    qa = {**named(["small", "large"])["cascades"][0],
          "shadow": {"rate": 0.5, "compare": "judge", "judge": "large"}}  # fmt: skip
    settings = load({"shadow": {"rate": 0.1, "queue": 8}, "cascades": [qa]}).cascade
    assert settings.shadowed
    assert settings.sampling(None).rate == 0.1
    own = settings.sampling(settings.cascades[0])
    assert (own.rate, own.compare, own.judge) == (0.5, "judge", "large")
    # Only named cascades, none of them shadowed: no queue is needed.
    quiet = load({"ad_hoc": False, "shadow": {"rate": 0.1},
                  "cascades": [{**qa, "shadow": {"rate": 0}}]}).cascade  # fmt: skip
    assert not quiet.shadowed
