"""The workloads and settings of analyze_accuracy.py's levers that need bodies (its Req, its
MODEL); imported by it, never run alone.

    semantic  QQP's labelled question pairs (qqp_dev): each pair's first question, then a share
              of them asked again later in the second pair's words (duplicates and
              non-duplicates alike: the cache must tell them apart), at temperature 0, on the
              Azure trace's clock. Off: the exact cache only; on: `semantic: true`.
    route     RouteLLM's MMLU questions to the route `auto` (default gpt-4o). A router is
              trained here, as `levergate router train` does, on the file's first
              `TRAIN_ROWS` rows (Mixtral's and GPT-4's correctness, under gpt-4o-mini and
              gpt-4o), for 95% quality; the workload is later rows. Off: the route's default;
              on: its learned router.
    trim      Anthropic HH-RLHF dialogues, every user turn a request carrying the history
              before it. Off: no trim; on: a `TRIM_BUDGET`-token budget and a 64-token output
              cap for gpt-4o-mini.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from harness import data_file

from levergate.config import Settings
from levergate.layers.measure.record import RequestRecord
from levergate.routing.labels import read_labels

SEED = 25
DAY = 86400.0
TRAIN_ROWS = 600
TRIM_BUDGET = 256
BODY_RATES = ("semantic", "route", "trim")
ROUTE_FILE = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"

Make = Callable[..., Any]  # analyze_accuracy.Req


def _clock(count: int) -> list[tuple[float, int]]:
    from levergate.bench.traces import read_azure

    trace = read_azure(data_file("azure_llm_trace_2023/AzureLLMInferenceTrace_conv.csv"))
    return [(r.offset_s, max(1, min(r.output_tokens, 300)))
            for _, r in zip(range(count), trace, strict=False)]  # fmt: skip


def semantic_requests(count: int, make: Make) -> list[Any]:
    """`count // 2` pairs (two thirds duplicates): every first question, and each pair's second
    question about half the workload later."""
    rng = random.Random(SEED)
    rows = [json.loads(x) for x in
            data_file("qqp_dev/qqp_pairs_dev.jsonl").open(encoding="utf-8")]  # fmt: skip
    n = max(2, count // 2)
    pairs = rng.sample([r for r in rows if r["label"] == 1], n - n // 3)
    pairs += rng.sample([r for r in rows if r["label"] == 0], n // 3)
    rng.shuffle(pairs)
    half = n // 2
    texts = [p["q1"] for p in pairs[:half]]
    for i in range(half, n):
        texts += [pairs[i]["q1"], pairs[i - half]["q2"]]
    texts += [p["q2"] for p in pairs[n - half :]]
    return [make(at, text, tokens) for (at, tokens), text in zip(_clock(len(texts)), texts,
                                                                  strict=False)]  # fmt: skip


def semantic_settings(url: str, *, on: bool) -> Settings:
    rule = {"semantic": on}
    return Settings.load(upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
                         models=[{"name": "gpt-4o-mini", "upstream": "sim"}],
                         cache={"enabled": True, "default": rule},
                         limits={"max_timeout_seconds": DAY})  # fmt: skip


def router_file(folder: Path, *, rows: int = TRAIN_ROWS) -> Path:
    """A router trained on the file's first `rows` rows, for gpt-4o-mini (cheap) and gpt-4o."""
    from levergate.config import RoutingSettings
    from levergate.routing.model import Models
    from levergate.routing.train import Options, embedder, features, spec_for, train

    labels = read_labels(data_file(ROUTE_FILE))
    labels = labels.subset(np.arange(rows))
    serving = RoutingSettings().embeddings
    spec = spec_for(serving, dimensions=384)
    x = features(labels.prompts, embed=embedder(serving), text_chars=spec.text_chars)
    router = train(labels, x=x, spec=spec, models=Models(cheap="gpt-4o-mini", strong="gpt-4o"),
                   options=Options(folds=3))  # fmt: skip
    path = folder / "router.json"
    router.save(path)
    return path


def route_requests(count: int, make: Make) -> list[Any]:
    labels = read_labels(data_file(ROUTE_FILE))
    prompts = labels.prompts[TRAIN_ROWS : TRAIN_ROWS + count]
    return [make(at, text[:4000], min(tokens, 64), model="auto")
            for (at, tokens), text in zip(_clock(count), prompts, strict=False)]  # fmt: skip


def route_settings(url: str, *, on: bool, router: Path) -> Settings:
    route: dict[str, Any] = {"name": "auto", "default": "gpt-4o"}
    if on:
        route["learned"] = {"file": str(router), "cheap": "gpt-4o-mini", "strong": "gpt-4o",
                            "target_quality": 0.95}  # fmt: skip
    return Settings.load(upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
                         models=[{"name": "gpt-4o-mini", "upstream": "sim"},
                                 {"name": "gpt-4o", "upstream": "sim"}],
                         routing={"routes": [route], "watch_seconds": 0},
                         cache={"enabled": False}, limits={"max_timeout_seconds": DAY})  # fmt: skip


def trim_requests(count: int, make: Make) -> list[Any]:
    """Each user turn of the HH dialogues with the history before it."""
    found: list[list[dict[str, str]]] = []
    for line in data_file("hh_rlhf_harmless_test/dialogues.jsonl").open(encoding="utf-8"):
        history = [{"role": "system", "content": "You are a helpful assistant."}]
        for turn in json.loads(line)["turns"]:
            history.append({"role": turn["role"], "content": turn["text"]})
            if turn["role"] == "user":
                found.append(list(history))
        if len(found) >= count:
            break
    return [make(at, "", max(tokens, 100), messages=tuple(messages))
            for (at, tokens), messages in zip(_clock(count), found, strict=False)]  # fmt: skip


def trim_settings(url: str, *, on: bool) -> Settings:
    trim = {"models": {"gpt-4o-mini": {"budget": TRIM_BUDGET, "max_tokens": 64}}} if on else {}
    return Settings.load(upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
                         models=[{"name": "gpt-4o-mini", "upstream": "sim"}], trim=trim,
                         cache={"enabled": False}, limits={"max_timeout_seconds": DAY})  # fmt: skip


def measured_rate(lever: str, records: Sequence[RequestRecord]) -> float:
    """The live run's counterpart of the analysis's rate for `lever`: the share of requests the
    semantic cache answered, the share a route sent to gpt-4o-mini, the share of the prompt
    tokens trimming left out."""
    n = len(records) or 1
    if lever == "semantic":
        return sum(r.cache is not None and r.cache.cache == "semantic" and r.cache.outcome.value
                   == "hit" for r in records) / n  # fmt: skip
    if lever == "route":
        return sum(r.alias == "gpt-4o-mini" for r in records) / n
    sent = sum(r.tokens.input_uncached + r.tokens.cached_read for r in records)
    cut = sum(r.trimmed_input for r in records)
    return cut / (sent + cut) if sent + cut else 0.0
