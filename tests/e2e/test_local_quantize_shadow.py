"""Quality retention of a quantized local alias, measured live (issue 29): the bundled model at
Q4_0 and at Q8_0 as two local upstreams, a route sending `faq` requests to the Q4_0 alias, and
the route's shadow sampling asking the Q8_0 alias (the reference) the same question off the
request path; `/metrics` carries the agreement counts and `levergate_route_quality_retention`.
A second route whose cheap alias is another name of the reference must agree every time. The
official OpenAI SDK is the client, through the proxy on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.e2e.shadow_rig import Metrics, ask, metrics, proxy, value

QUESTIONS = ["What is the capital of France?", "What is 2 plus 2?", "Name a colour."]


def settings(cache_dir: Path) -> dict[str, Any]:
    # One slot each: a greedy answer is the same twice only when it is computed alike, and
    # llama.cpp's logits can shift with what else shares the batch (with two slots, one "same"
    # shadow of three disagreed once under `make test`'s load, where timings interleave them).
    def local(name: str, level: str) -> dict[str, Any]:
        return {"kind": "local", "name": name, "requantize": level,
                "cache_dir": str(cache_dir), "threads": 1, "slots": 1, "n_ctx": 2048,
                "embeddings": {"enabled": False}}  # fmt: skip

    def faq_to(alias: str) -> list[dict[str, Any]]:
        return [{"name": "faq", "to": alias, "when": {"feature": ["faq"]}}]

    return {
        "server": {"port": 0},
        "cache": {"enabled": False},
        "upstreams": [local("q8", "q8_0"), local("q4", "q4_0")],
        "models": [{"name": "smollm2-q8", "upstream": "q8"},
                   {"name": "smollm2-q8-twin", "upstream": "q8"},
                   {"name": "smollm2-q4", "upstream": "q4"}],
        "routing": {"shadow": {"rate": 1.0},
                    "routes": [{"name": "quantized", "default": "smollm2-q8",
                                "rules": faq_to("smollm2-q4")},
                               {"name": "same", "default": "smollm2-q8",
                                "rules": faq_to("smollm2-q8-twin")}]},
    }  # fmt: skip


def shadowed(found: Metrics, route: str, result: str) -> float:
    return value(found, "levergate_route_shadow_total", route=route, result=result) or 0.0


async def test_a_quantized_alias_is_shadowed_by_its_reference(tmp_path: Path) -> None:
    async with proxy(settings(tmp_path)) as (sdk, metrics_url):
        for text in QUESTIONS:
            for route in ("quantized", "same"):
                reply = await sdk.chat.completions.create(
                    model=route, messages=ask(text), temperature=0, max_tokens=16
                )
                assert reply.choices[0].message.content
        found: Metrics = {}
        for _ in range(600):  # the shadows run off the request path: bounded wait for them
            found = await metrics(metrics_url)
            done = sum(shadowed(found, r, k) for r in ("quantized", "same")
                       for k in ("agree", "disagree"))  # fmt: skip
            if done == 2 * len(QUESTIONS):
                break
            await asyncio.sleep(0.1)
    compared = shadowed(found, "quantized", "agree") + shadowed(found, "quantized", "disagree")
    assert compared == len(QUESTIONS)
    assert shadowed(found, "same", "agree") == len(QUESTIONS)  # greedy, same file: identical
    retention = "levergate_route_quality_retention"
    measured = value(found, retention, route="quantized")
    assert measured is not None
    assert 0.0 <= measured <= 1.0
    assert measured == 1 - shadowed(found, "quantized", "disagree") / len(QUESTIONS)
    assert value(found, retention, route="same") == 1.0
