"""Routing: model aliases that are not models but a choice between them (`model="auto"`).

A route is resolved in FRONT by `layers/route.py`: its `rules` are tried in order (first match
wins), then its `learned` router if it has one, then `default` — the strong alias, which is also
the counterfactual the ledger prices a routed request against. Every alias a route names must be
a configured model (a typo is a start-up error, never a silent trip to the wildcard).

    routing:
      routes:
        - name: auto
          default: gpt-4o
          rules:
            - {name: big-prompts, to: gpt-4o, when: {min_prompt_tokens: 4000}}
            - {name: free-tier, to: gpt-4o-mini, when: {metadata: {tier: free}}}
          learned: {file: router.json, cheap: gpt-4o-mini, strong: gpt-4o, target_quality: 0.95}
          shadow: {rate: 0.05}          # this route's own sampling (else routing.shadow's)
      shadow: {rate: 0.02, queue: 256, concurrency: 2, timeout_seconds: 120}

Shadow sampling (config/shadow.py, the same settings cascades use) measures what a route keeps
live: a share of the answers it sent to an alias other than its `default` is answered again by
the default, off the request path, and the two are compared (layers/route_shadow.py), giving
`levergate_route_quality_retention` beside the offline `levergate_router_quality_retention`.
`routing.shadow` is every route's default sampling and the routes' one queue; a route's own
`shadow` replaces the sampling (rate, compare, judge) whole. Off by default (`rate: 0`).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal

from pydantic import Field, model_validator

from levergate.config.base import _Strict
from levergate.config.local import LocalEmbeddingsSettings
from levergate.config.shadow import ShadowSamplingSettings, ShadowSettings, unknown_judge

# OpenAI's own bounds on `metadata`: 16 pairs, keys up to 64 characters, values up to 512.
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# `levergate router train` defaults. C is the inverse L2 strength of the logistic regression
# on standardised features; 392 features over a few thousand rows need strong shrinkage. It is
# chosen without the rows it is measured on: benchmarks/routing.py's nested cross-validation
# lets each outer training part of the MMLU dev file choose C from 0.0001-0.01 by its own inner
# out-of-fold saving at 95%, and for the `gain` target the five parts chose 0.0003, 0.001,
# 0.003, 0.0003 and 0.001: the median, 0.001, is the default (benchmarks/results/routing.md).
TRAIN_C = 0.001
TRAIN_FOLDS = 5
TRAIN_TARGET_QUALITY = 0.95
# The fewest logged labels (with prompts) `levergate labels export` and `router train
# --from-log` accept for a route: below 100, one disagreement moves a held-out retention by more
# than a point, so a 95% target cannot be told from 94%.
LEARN_MIN_LABELS = 100
# The newest share of a route's logged labels held back from training to evaluate on.
LEARN_TEST_SHARE = 0.3
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")


class WhenSettings(_Strict):
    """What a rule tests; every field given must hold (an empty `when` always matches)."""

    feature: list[str] | None = None  # the `x-levergate-feature` tag is one of these
    tenant: list[str] | None = None
    metadata: dict[str, str] = Field(default_factory=dict, max_length=MAX_METADATA_KEYS)
    # Prompt size in tokens (every message's text, counted with the default alias's tokenizer).
    min_prompt_tokens: int | None = Field(None, ge=0)
    max_prompt_tokens: int | None = Field(None, ge=0)
    tools: bool | None = None  # the request offers tools (or functions)
    images: bool | None = None  # a message carries an image part
    response_format: bool | None = None  # asks for JSON (json_object / json_schema)


class RuleSettings(_Strict):
    name: str = Field(pattern=_NAME.pattern)  # the `reason` label in metrics and the record
    to: str
    when: WhenSettings = Field(default_factory=WhenSettings)


class LearnedSettings(_Strict):
    """A router file from `levergate router train`. Its threshold is the one stored in the file
    (chosen on training folds for the file's target quality) unless `threshold` or
    `target_quality` is given; `target_quality` re-reads the threshold from the file's own
    out-of-fold curve, so the quality it promises stays a measured one."""

    file: str
    cheap: str
    strong: str
    threshold: float | None = None
    target_quality: float | None = Field(None, gt=0, le=1)
    # The share of the answers this router sent to the strong alias that the cheap one answers
    # too, off the path, for labels where it chose the strong model (layers/route_shadow.py):
    # without them, labels from traffic cover only what it already sends cheap. Each one is a
    # cheap call; the route's shadow queue runs them.
    explore: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_threshold(self) -> LearnedSettings:
        if self.threshold is not None and self.target_quality is not None:
            raise ValueError("give learned.threshold or learned.target_quality, not both")
        return self


class RouteSpecSettings(_Strict):
    name: str = Field(pattern=_NAME.pattern)
    default: str  # the strong alias: what answers when nothing else decides
    rules: list[RuleSettings] = Field(default_factory=list, max_length=256)
    learned: LearnedSettings | None = None
    # None: `routing.shadow`'s sampling.
    shadow: ShadowSamplingSettings | None = None


class RouterEmbeddingsSettings(LocalEmbeddingsSettings):
    """The learned routers' MiniLM: its own defaults for the request path, kept when a config
    sets only some fields. No micro-batching wait: a routed request must not wait for company
    (the batcher still merges requests that arrive together). 32 tokens with int8 MatMuls: the
    decision's budget is ~3 ms; on MMLU it measured 3.1-3.6 ms p50 on a quiet host (the float
    graph 1.7-1.9x that) and saved 47.2% of strong calls at 95% quality on rows never seen,
    where 64 tokens saves 51.0% in 5.6 ms; a prompt-length rule saves 48.1% on the same rows
    (benchmarks/results/routing*.md)."""

    batch_wait_ms: float = Field(0.0, ge=0)
    max_tokens: int = Field(32, ge=8, le=512)
    quantize: Literal["off", "int8"] = "int8"


class RoutingSettings(_Strict):
    routes: list[RouteSpecSettings] = Field(default_factory=list)
    # The learned routers' embedder (all routes share one); the router file names the
    # embedder it was trained with and start-up checks they agree.
    embeddings: RouterEmbeddingsSettings = Field(default_factory=RouterEmbeddingsSettings)
    # Text longer than this is estimated (chars / 4, flagged) instead of counted: tokenizing a
    # multi-megabyte body costs more than any rule it could decide.
    max_counted_chars: int = Field(400_000, ge=1)
    # Live quality measured: answers from a non-default alias shadowed by the default (off).
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)
    # How often (seconds) each learned route's router file is checked for a change on disk
    # (`levergate router promote | rollback` replace it): a changed file is loaded and checked
    # off the request path and served from the next request; one that fails to load or was
    # trained for other models is refused with a logged error and the route keeps its router.
    # 0: never (a restart or a reload reads it).
    watch_seconds: float = Field(2.0, ge=0, le=3600)

    @property
    def enabled(self) -> bool:
        return bool(self.routes)

    def sampling(self, route: RouteSpecSettings) -> ShadowSamplingSettings:
        """The shadow sampling of `route`: its own, else `routing.shadow`'s."""
        return route.shadow if route.shadow is not None else self.shadow

    @property
    def shadowed(self) -> bool:
        """Some route shadows or explores its answers (the routes' shadow queue is needed)."""
        return any(self.sampling(r).rate > 0 or (r.learned is not None and r.learned.explore > 0)
                   for r in self.routes)  # fmt: skip

    def check(self, aliases: Collection[str]) -> None:
        """Every alias a route names is a configured model; route names are not (raises
        ValueError, which the settings loader reports with where it was)."""
        names = [r.name for r in self.routes]
        if len(names) != len(set(names)):
            raise ValueError("routing: route names must be unique")
        if (judge := unknown_judge(self.shadow, aliases)) is not None:
            raise ValueError(f"routing.shadow.judge names unknown model {judge!r}")
        for route in self.routes:
            where = f"routing route {route.name!r}"
            if route.name in aliases:
                raise ValueError(f"{where}: the name is already a model alias")
            named = [("default", route.default)] + [(f"rule {r.name!r}", r.to) for r in route.rules]
            if route.learned is not None:
                named += [("learned.cheap", route.learned.cheap)]
                named += [("learned.strong", route.learned.strong)]
            if route.shadow is not None and route.shadow.judge is not None:
                named += [("shadow.judge", route.shadow.judge)]
            for what, alias in named:
                if alias not in aliases:
                    raise ValueError(f"{where}: {what} names unknown model {alias!r}")
