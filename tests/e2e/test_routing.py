"""`model="auto"` end to end: the OpenAI SDK -> levergate -> the simulator, on loopback. Rules
route by feature tag and metadata; a learned router trained here on a tiny labelled set, with
the real MiniLM embedder, sends maths questions to the strong alias and small talk to the cheap
one. The simulator echoes the model name it was sent, so the answer says where it went."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from levergate.config import RoutingSettings, Settings
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.routing.labels import Labels
from levergate.routing.model import Models
from levergate.routing.train import Options, embedder, features, spec_for, train
from levergate.server.run import serving
from levergate.simulator import SimHandle

SMALL_TALK = [
    "Say hello to my friend Ann.", "What a lovely sunny day it is!",
    "Thanks for the gift, it was great.", "Good morning, how are you today?",
    "Wish my brother a happy birthday.", "Tell me a nice greeting for a card.",
]  # fmt: skip
MATHS = ["Prove that the integral of 1/x^2 from 1 to infinity converges.",
         "Find the eigenvalues of the matrix [[2, 1], [1, 2]].",
         "Compute the derivative of x^3 * sin(x) and simplify.",
         "Show that the series sum 1/n^2 converges, with a proof.",
         "Solve the differential equation y'' + y = 0.",
         "Evaluate the limit of (1 + 1/n)^n as n tends to infinity."]  # fmt: skip
MODELS = [{"name": "mini", "upstream": "default", "upstream_model": "sim-mini"},
          {"name": "big", "upstream": "default", "upstream_model": "sim-big"}]  # fmt: skip


def router_file(path: Path) -> Path:
    rng = np.random.default_rng(0)
    prompts = [p for _ in range(6) for p in SMALL_TALK + MATHS]
    hard = np.array([p in MATHS for p in prompts])
    cheap = np.where(hard, rng.random(len(prompts)) < 0.1, rng.random(len(prompts)) < 0.95)
    labels = Labels(prompts, cheap.astype(float), np.ones(len(prompts)), "synthetic")
    settings = RoutingSettings().embeddings  # the embedder the routes serve with
    spec = spec_for(settings, dimensions=384)
    x = features(prompts, embed=embedder(settings), text_chars=spec.text_chars)
    router = train(labels, x=x, spec=spec, models=Models(cheap="sim-mini", strong="sim-big"),
                   options=Options(folds=3, c=1.0))  # fmt: skip
    router.save(path)
    return path


@asynccontextmanager
async def routed(sim: SimHandle, routing: dict[str, Any]) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = Settings.for_upstream(sim.base_url, server={"port": 0}, models=MODELS,
                                     routing=routing)  # fmt: skip
    async with (
        Gateway(settings) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk", max_retries=0) as client,
    ):
        yield client


async def ask(client: openai.AsyncOpenAI, text: str, **extra: Any) -> str:
    reply = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": text}], max_tokens=4, **extra
    )
    return str(reply.model)


async def test_rules_route_by_feature_and_metadata(sim: SimHandle) -> None:
    routing = {"routes": [{"name": "auto", "default": "big", "rules": [
        {"name": "free", "to": "mini", "when": {"metadata": {"tier": "free"}}},
        {"name": "faq", "to": "mini", "when": {"feature": ["faq"]}},
    ]}]}  # fmt: skip
    async with routed(sim, routing) as client:
        assert await ask(client, "hi") == "sim-big"
        assert await ask(client, "hi", extra_headers={"x-levergate-feature": "faq"}) == "sim-mini"
        assert await ask(client, "hi", metadata={"tier": "free"}) == "sim-mini"
        with pytest.raises(openai.BadRequestError) as raised:
            await ask(client, "hi", metadata={"tier": "x" * 600})
        assert "metadata" in str(raised.value)


async def test_the_exact_cache_keeps_one_features_routed_answer_from_another(
    sim: SimHandle,
) -> None:
    routing = {"routes": [{"name": "auto", "default": "big", "rules": [
        {"name": "faq", "to": "mini", "when": {"feature": ["faq"]}},
    ]}]}  # fmt: skip
    async with routed(sim, routing) as client:
        faq = {"x-levergate-feature": "faq"}
        assert await ask(client, "hi", temperature=0, extra_headers=faq) == "sim-mini"
        assert await ask(client, "hi", temperature=0, extra_headers=faq) == "sim-mini"  # a hit
        # The same body under another feature routes to the strong model, not to faq's entry.
        assert await ask(client, "hi", temperature=0) == "sim-big"
    assert sim.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 2


async def test_the_learned_router_routes_unseen_prompts(sim: SimHandle, tmp_path: Path) -> None:
    path = router_file(tmp_path / "router.json")
    routing = {
        "routes": [
            {
                "name": "auto",
                "default": "big",
                "learned": {"file": str(path), "cheap": "mini", "strong": "big"},
            }
        ]
    }
    async with routed(sim, routing) as client:
        # Neither prompt is in the training set.
        assert await ask(client, "Integrate x * e^x by parts and prove the result.") == "sim-big"
        assert await ask(client, "Hello there, have a wonderful weekend!") == "sim-mini"
        stream = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Good evening, dear friend."}],
            max_tokens=4, stream=True,
        )  # fmt: skip
        models = {chunk.model async for chunk in stream}
        assert models == {"sim-mini"}
        root = str(client.base_url).removesuffix("/").removesuffix("/v1")
        async with httpx.AsyncClient() as http:
            metrics = await http.get(f"{root}/metrics")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    routed_by = {(s.labels["chosen"], s.labels["reason"]): s.value
                 for s in families["levergate_routed_requests"].samples
                 if s.name.endswith("_total")}  # fmt: skip
    assert routed_by == {("big", "learned"): 1.0, ("mini", "learned"): 2.0}
    assert families["levergate_router_quality_retention"].samples[0].value >= 0.95


async def test_a_router_file_for_other_models_fails_start_up(
    sim: SimHandle, tmp_path: Path
) -> None:
    path = router_file(tmp_path / "router.json")
    routing = {
        "routes": [
            {
                "name": "auto",
                "default": "mini",
                "learned": {"file": str(path), "cheap": "big", "strong": "mini"},
            }
        ]
    }
    with pytest.raises(ConfigError, match="trained for cheap model 'sim-mini'"):
        async with routed(sim, routing):
            pass


async def test_the_chosen_alias_keeps_its_own_fallbacks(sim: SimHandle) -> None:
    """Route sits above Fallback: the alias a rule chose fails over as if it had been asked."""
    settings = Settings.load(
        server={"port": 0},
        upstreams=[{"name": "sim", "base_url": sim.base_url},
                   {"name": "dead", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "mini", "upstream": "dead", "fallbacks": ["big"]},
                {"name": "big", "upstream": "sim", "upstream_model": "sim-big"}],
        routing={"routes": [{"name": "auto", "default": "big", "rules": [
            {"name": "long", "to": "big", "when": {"min_prompt_tokens": 50}},
            {"name": "rest", "to": "mini"}]}]},
        traffic={"retry": {"max_attempts": 1}},
    )  # fmt: skip
    async with (
        Gateway(settings) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk", max_retries=0) as client,
    ):
        assert await ask(client, "short") == "sim-big"
        assert await ask(client, "many words " * 40) == "sim-big"
        root = url.removesuffix("/").removesuffix("/v1")
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{root}/metrics")).text
    assert 'levergate_fallbacks_total{fallback="big",model="mini"} 1.0' in metrics
    assert 'levergate_routed_requests_total{chosen="big",reason="long",route="auto"} 1.0' in metrics
    assert (
        'levergate_routed_requests_total{chosen="mini",reason="rest",route="auto"} 1.0' in metrics
    )
