"""Route over an in-memory inner service: rules, the learned router with a keyword embedder
(the real MiniLM runs in tests/e2e/test_routing.py), the record, metrics and start-up errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from levergate.config import RoutingSettings, Settings
from levergate.core.call import Call, Context, RouteDecision
from levergate.core.clock import SystemClock
from levergate.core.controls import Controls, Principal
from levergate.core.service import Service
from levergate.errors import BadRequest, ConfigError
from levergate.layers.route import Route
from levergate.layers.shared import Shared
from levergate.routing.features import STRUCTURE, vectors
from levergate.routing.labels import Labels
from levergate.routing.model import FeatureSpec, Models
from levergate.routing.train import Options, train
from tests.unit.layers.test_front import Scripted

HARD = ("integral", "prove", "theorem", "derivative")
MODELS = [{"name": n, "upstream": "up", "upstream_model": f"{n}-model"} for n in ("mini", "big")]


class Keywords:
    """An embedder whose first coordinate counts hard words: a router can learn from it."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [keywords(t) for t in texts]


def keywords(text: str) -> list[float]:
    return [float(sum(w in text.lower() for w in HARD)), 1.0, float(len(text) % 3)]


def settings(routing: dict[str, Any]) -> Settings:
    return Settings.load(upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
                         models=MODELS, routing=routing)  # fmt: skip


def build(s: Settings, inner: Service) -> tuple[Service, CollectorRegistry]:
    registry = CollectorRegistry()
    models = {m.name: m for m in s.models}
    shared = Shared.build(s, models=models, clock=SystemClock(), registry=registry)
    layer = Route.layer(s.routing, models=models, shared=shared, embedder=Keywords())
    assert layer is not None
    return layer(inner), registry


def chat(text: str, *, model: str = "auto", feature: str = "", **body: Any) -> Call:
    payload = {"model": model, "messages": [{"role": "user", "content": text}], **body}
    return Call(kind="chat", body=payload, ctx=Context("r", controls=Controls(feature=feature)))


async def test_rules_first_match_then_default() -> None:
    routing = {"routes": [{"name": "auto", "default": "big", "rules": [
        {"name": "json", "to": "big", "when": {"response_format": True}},
        {"name": "faq", "to": "mini", "when": {"feature": ["faq"]}},
        {"name": "short", "to": "mini", "when": {"max_prompt_tokens": 5}},
    ]}]}  # fmt: skip
    inner = Scripted()
    route, registry = build(settings(routing), inner)
    calls = [
        chat("a long question about many different things", feature="faq"),
        chat("hi"),
        chat("a long question about many different things"),
        chat("x", feature="faq", response_format={"type": "json_object"}),
        chat("untouched", model="mini"),
    ]
    for call in calls:
        await route(call)
    assert [c.model for c in inner.calls] == ["mini", "mini", "big", "big", "mini"]
    decisions = [c.ctx.trace.route for c in calls]
    assert decisions[0] == RouteDecision(router="rules", asked="auto", chosen="mini",
                                         default="big", reason="faq")  # fmt: skip
    assert [d.reason for d in decisions[:4] if d] == ["faq", "short", "default", "json"]
    assert decisions[4] is None
    text = generate_latest(registry).decode()
    assert 'levergate_routed_requests_total{chosen="mini",reason="faq",route="auto"} 1.0' in text
    with pytest.raises(BadRequest, match="chat and completion"):
        await route(Call(kind="embedding", body={"model": "auto", "input": "x"},
                         ctx=Context("r")))  # fmt: skip
    with pytest.raises(BadRequest):
        await route(chat("x", metadata={"k": 1}))


def router_file(tmp_path: Path, *, cheap: str = "mini-model", strong: str = "big") -> Path:
    rng = np.random.default_rng(0)
    words = ["hello there", "thanks a lot", "what time is it", "integral of x", "prove theorem",
             "derivative and integral"]  # fmt: skip
    prompts = [words[i] for i in rng.integers(0, len(words), 200)]
    hard = np.array([any(w in p for w in HARD) for p in prompts])
    cheap_ok = np.where(hard, rng.random(200) < 0.1, rng.random(200) < 0.95).astype(float)
    strong_ok = np.where(hard, rng.random(200) < 0.95, rng.random(200) < 0.95).astype(float)
    labels = Labels(prompts, cheap_ok, strong_ok, "synthetic")
    embedded = np.array([keywords(p) for p in prompts])
    serving = RoutingSettings().embeddings  # what the route checks the file against
    spec = FeatureSpec(embedder=serving.identity, dimensions=3, max_tokens=serving.max_tokens,
                       text_chars=1024, structure=list(STRUCTURE))  # fmt: skip
    router = train(labels, x=vectors(prompts, embedded), spec=spec,
                   models=Models(cheap=cheap, strong=strong), options=Options(folds=3))  # fmt: skip
    path = tmp_path / "router.json"
    router.save(path)
    return path


async def test_the_learned_router_sends_hard_prompts_to_the_strong_model(tmp_path: Path) -> None:
    path = router_file(tmp_path)
    routing = {"routes": [{"name": "auto", "default": "big", "rules": [
        {"name": "pinned", "to": "big", "when": {"tenant": ["vip"]}}],
        "learned": {"file": str(path), "cheap": "mini", "strong": "big"}}]}  # fmt: skip
    inner = Scripted()
    route, registry = build(settings(routing), inner)
    easy, hard = chat("thanks a lot"), chat("prove the theorem on this integral")
    await route(easy)
    await route(hard)
    assert [c.model for c in inner.calls] == ["mini", "big"]
    assert easy.ctx.trace.route is not None
    assert hard.ctx.trace.route is not None
    assert easy.ctx.trace.route.router == "learned"
    assert easy.ctx.trace.route.default == "big"
    assert (easy.ctx.trace.route.score or 0) < (hard.ctx.trace.route.score or 0)
    vip = Call(kind="chat", body=easy.body, ctx=Context("r", principal=Principal(tenant="vip")))
    await route(vip)
    assert inner.calls[-1].model == "big"
    text = generate_latest(registry).decode()
    assert 'levergate_router_quality_retention{route="auto"}' in text
    assert 'levergate_routed_requests_total{chosen="big",reason="learned",route="auto"}' in text


def test_a_target_quality_rereads_the_threshold(tmp_path: Path) -> None:
    path = router_file(tmp_path)
    for quality in (0.5, 1.0):
        learned = {"file": str(path), "cheap": "mini", "strong": "big", "target_quality": quality}
        s = settings({"routes": [{"name": "auto", "default": "big", "learned": learned}]})
        _, registry = build(s, Scripted())
        kept = registry.get_sample_value("levergate_router_quality_retention", {"route": "auto"})
        assert kept is not None
        assert kept >= quality


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"routes": [{"name": "auto", "default": "gpt-5"}]}, "default names unknown model"),
        ({"routes": [{"name": "auto", "default": "big",
                      "rules": [{"name": "r", "to": "typo"}]}]}, "rule 'r' names unknown"),
        ({"routes": [{"name": "mini", "default": "big"}]}, "already a model alias"),
        ({"routes": [{"name": "a", "default": "big"}, {"name": "a", "default": "big"}]},
         "unique"),
        ({"routes": [{"name": "a", "default": "big", "learned": {
            "file": "f", "cheap": "mini", "strong": "big", "threshold": 0.1,
            "target_quality": 0.9}}]}, "not both"),
    ],
)  # fmt: skip
def test_bad_routes_are_start_up_errors(routing: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(routing)


def test_a_router_for_other_models_or_a_broken_file_is_refused(tmp_path: Path) -> None:
    path = router_file(tmp_path, cheap="llama-3-8b")
    learned = {"file": str(path), "cheap": "mini", "strong": "big"}
    s = settings({"routes": [{"name": "auto", "default": "big", "learned": learned}]})
    with pytest.raises(ConfigError, match=rf"{path}.*trained for cheap model 'llama-3-8b'"):
        build(s, Scripted())
    path.write_text("{}")
    with pytest.raises(ConfigError, match="not a levergate router"):
        build(s, Scripted())


@pytest.mark.parametrize(
    ("embeddings", "served"),
    [({"quantize": "off"}, "all-minilm-l6-v2 of 32"), ({"max_tokens": 128}, "+int8 of 128")],
)
def test_a_router_trained_on_other_embeddings_is_refused(
    tmp_path: Path, embeddings: dict[str, Any], served: str
) -> None:
    """The file was trained on int8 vectors of 32 tokens: float vectors, or int8 ones of more
    tokens, are other features, and routing on them would be routing on noise."""
    learned = {"file": str(router_file(tmp_path)), "cheap": "mini", "strong": "big"}
    s = settings({"routes": [{"name": "auto", "default": "big", "learned": learned}],
                  "embeddings": embeddings})  # fmt: skip
    with pytest.raises(ConfigError, match=rf"trained on all-minilm-l6-v2\+int8 embeddings of "
                       rf"32 tokens, routing.embeddings gives .*{re.escape(served)}"):  # fmt: skip
        build(s, Scripted())
