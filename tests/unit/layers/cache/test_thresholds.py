"""The semantic cache's thresholds file (layers/cache/thresholds.py): installed and rolled back
atomically, read by a running cache when it changes, refused (and the old thresholds kept)
when it does not load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.layers.cache.build import semantic_layer
from levergate.layers.cache.thresholds import (
    RouteThreshold,
    Thresholds,
    ThresholdWatch,
    install,
    load,
    rollback,
)
from levergate.layers.shared import Shared
from levergate.testing import ManualClock
from tests.unit.layers.cache.test_checks import Answers
from tests.unit.layers.cache.test_semantic import BagOfWords, ask


def test_install_keeps_the_other_routes_and_rollback_swaps_back(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    install(path, "faq", RouteThreshold(threshold=0.9, previous=0.95))
    install(path, "chat", RouteThreshold(threshold=0.85, previous=0.95, target_false_hit=0.02))
    assert load(path).thresholds() == {"faq": 0.9, "chat": 0.85}
    assert rollback(path, "faq", default=0.95).threshold == 0.95
    assert load(path).thresholds() == {"faq": 0.95, "chat": 0.85}
    rollback(path, "faq", default=0.95)  # a second rollback undoes the first
    assert load(path).thresholds()["faq"] == 0.9
    with pytest.raises(ConfigError, match="no threshold for 'other'"):
        rollback(path, "other", default=0.95)
    assert not list(tmp_path.glob(".*tmp"))  # written beside, renamed over


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "is not JSON"),
        ('{"format": "levergate-router"}', "has no format 'levergate-cache-thresholds'"),
        (
            '{"format": "levergate-cache-thresholds", "routes": {"faq": {"threshold": 1.5}}}',
            "malformed at routes.faq.threshold",
        ),
    ],
)
def test_a_file_that_does_not_load_is_refused_naming_it(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=why):
        load(path)
    assert load(tmp_path / "absent.json").thresholds() == {}


async def test_the_watch_swaps_thresholds_and_refuses_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    install(path, "faq", RouteThreshold(threshold=0.9))
    thresholds = Thresholds(0.95)
    registry = CollectorRegistry()
    watch = ThresholdWatch(str(path), thresholds, clock=ManualClock(), every=1.0,
                           registry=registry)  # fmt: skip
    watch.first()
    assert (thresholds.of("faq"), thresholds.of("other")) == (0.9, 0.95)
    install(path, "faq", RouteThreshold(threshold=0.8))
    await watch.check()
    assert thresholds.of("faq") == 0.8
    path.write_text('{"format": "levergate-cache-thresholds", "routes": {"faq": 7}}')
    await watch.check()
    assert thresholds.of("faq") == 0.8  # kept
    count = registry.get_sample_value
    assert count("levergate_cache_threshold_reloads_total", {"result": "refused"}) == 1
    assert count("levergate_cache_threshold_reloads_total", {"result": "loaded"}) == 1
    path.unlink()
    await watch.check()
    assert thresholds.of("faq") == 0.95  # no file: the configured threshold


async def test_a_route_serves_at_its_installed_threshold(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": "levergate-cache-thresholds",
                                "routes": {"m": {"threshold": 0.7}}}))  # fmt: skip
    s = Settings.load(
        upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "m", "upstream": "up"}, {"name": "n", "upstream": "up"}],
        cache={"default": {"semantic": True},
               "semantic": {"threshold": 0.8, "guards": [], "thresholds_file": str(path)}},
    )  # fmt: skip
    shared = Shared.build(s, models={m.name: m for m in s.models}, clock=ManualClock(),
                          registry=CollectorRegistry())  # fmt: skip
    layer = semantic_layer(s.cache, shared=shared, routes=Answers(), embedder=BagOfWords())
    assert layer is not None
    assert [j.name for j in shared.jobs] == ["cache_threshold_watch"]
    cache = layer(Answers())
    for model in ("m", "n"):
        await cache(ask("capital of France", model=model))
    near = "capital of France weather today"  # 0.71 from the stored question
    assert (await cache(ask(near, model="m"))).headers["x-levergate-cache"] == "semantic"
    assert "x-levergate-cache" not in (await cache(ask(near, model="n"))).headers  # a miss


def test_a_thresholds_file_that_does_not_load_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("garbage")
    s = Settings.load(
        upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "m", "upstream": "up"}],
        cache={"default": {"semantic": True}, "semantic": {"thresholds_file": str(path)}},
    )  # fmt: skip
    shared = Shared.build(s, models={m.name: m for m in s.models}, clock=ManualClock(),
                          registry=CollectorRegistry())  # fmt: skip
    with pytest.raises(ConfigError, match=f"thresholds file {path} is not JSON"):
        semantic_layer(s.cache, shared=shared, routes=Answers(), embedder=BagOfWords())
