"""The caches as the pipeline builds them from settings."""

from __future__ import annotations

import pytest

from levergate.config import ModelSettings, Settings, TargetSettings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Reply
from levergate.errors import ConfigError, LevergateError
from levergate.layers.cache.build import ServiceEmbedder, resolve_model
from levergate.pipeline import Deps, build_pipeline
from tests.unit.layers.cache.test_semantic import BagOfWords


def test_resolved_models_name_every_endpoint_and_the_alias() -> None:
    models = {
        "fast": ModelSettings(name="fast", upstream="a", upstream_model="tiny-1"),
        "pair": ModelSettings(name="pair", endpoints=[TargetSettings(upstream="a"),
                                              TargetSettings(upstream="b", upstream_model="x")]),
        "*": ModelSettings(name="*", upstream="a"),
    }  # fmt: skip
    assert resolve_model(models, "fast") == "fast->a/tiny-1"
    assert resolve_model(models, "pair") == "pair->a/pair,b/x"
    assert resolve_model(models, "other") == "other->a/other"
    assert resolve_model({}, "ghost") == "ghost"


def test_a_routed_alias_stands_for_its_feature_tag_too() -> None:
    # A route may send one body to two models by the feature tag, which the body lacks: the
    # cache must not hand one feature's answer (from the cheap model) to the other.
    routed = frozenset({"auto"})
    faq = resolve_model({}, "auto", "faq", routed=routed)
    legal = resolve_model({}, "auto", "legal", routed=routed)
    assert faq != legal
    assert resolve_model({}, "fast", "faq", routed=routed) == "fast"  # not routed: no change


def test_the_pipeline_stacks_the_caches_only_when_enabled() -> None:
    base = {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": "*", "upstream": "u"}]}  # fmt: skip
    assert build_pipeline(Settings.load(path=None, **base)).shared.cache is not None
    assert (
        build_pipeline(Settings.load(path=None, **base, cache={"enabled": False})).shared.cache
        is None
    )


async def test_service_embedder_reads_vectors_in_index_order() -> None:
    class Routes:
        async def __call__(self, call: Call) -> Reply:
            assert call.kind == "embedding"
            rows = [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]
            return Completed(data={"data": rows})

    embedder = ServiceEmbedder(Routes(), model="e")
    assert await embedder.embed(["a", "b"]) == [[1.0], [2.0]]


async def test_semantic_layer_is_built_when_a_rule_opts_in() -> None:
    base = {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": "*", "upstream": "u"}]}  # fmt: skip
    settings = Settings.load(path=None, **base, cache={"models": {"m": {"semantic": True}}},
                             traffic={"retry": {"enabled": False}})  # fmt: skip
    embedder = BagOfWords()
    pipeline = build_pipeline(settings, Deps(embedder=embedder))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    call = Call(kind="chat", body=body, ctx=Context("r"))
    with pytest.raises(LevergateError):  # nothing listens upstream: what counts is the embedding
        await pipeline.service(call)
    assert embedder.calls == 1
    await pipeline.aclose()


async def test_a_shared_semantic_index_needs_entries_the_replicas_share() -> None:
    base = {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}],
            "models": [{"name": "*", "upstream": "u"}]}  # fmt: skip
    semantic = {"models": {"m": {"semantic": True}}, "semantic": {"index": "redis"}}
    with pytest.raises(ConfigError, match=r"cache\.store\.backend 'memory'"):
        build_pipeline(
            Settings.load(path=None, **base, cache=semantic), Deps(embedder=BagOfWords())
        )
    shared = Settings.load(path=None, **base, cache={**semantic, "store": {"backend": "redis"}})
    pipeline = build_pipeline(shared, Deps(embedder=BagOfWords()))
    assert len(pipeline.background) == 1  # the index follows its log off the request path
    await pipeline.aclose()  # nothing connected yet: building never touches Redis
