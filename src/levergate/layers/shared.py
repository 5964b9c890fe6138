"""`Shared`: the one value every layer of a pipeline is built from, besides its own settings.

`build_pipeline` calls `Shared.build` once; each layer's builder (`Retry.layer(settings, shared=
shared)`, ...) takes what it needs from it and returns the layer, or None when its lever is off.
So which layers exist, in what order, is written in `pipeline.py` alone, and what they share —
the clock, the metrics registry, the seeded random sources, the traffic, cache and key state, the
model catalog, the ledger's account of what the gateway spends on its own — is built in one
place. The two lists collect what the built layers own: things to close when the pipeline
closes, and background jobs for `Gateway.start`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from levergate.catalog import Catalog
from levergate.config import Model, Settings
from levergate.core.clock import Clock
from levergate.core.jobs import Job
from levergate.layers.cache.build import CacheState
from levergate.layers.keys.build import KeyKit, build_keys
from levergate.layers.measure.ledger import Ledger, LedgerMetrics, OwnSpend
from levergate.layers.prompt_cache.state import PromptCacheState
from levergate.layers.traffic.state import TrafficState
from levergate.protocol.tokens import Tokenizers
from levergate.stores.responses import ResponseStore, build_response_store


class Seeds:
    """The pipeline's random sources: each user draws a `random.Random` of its own, all derived
    from `traffic.seed` when it is set (jitter and load spreading, not secrets: a seedable PRNG
    is the point), in the order the pipeline builds its layers."""

    def __init__(self, seed: int | None) -> None:
        self._seeds = random.Random(seed)  # noqa: S311

    def rng(self) -> random.Random:
        return random.Random(self._seeds.getrandbits(64))  # noqa: S311


@dataclass(frozen=True)
class Shared:
    clock: Clock
    registry: CollectorRegistry
    seeds: Seeds
    traffic: TrafficState
    cache: CacheState | None  # None: `cache.enabled` is off
    keys: KeyKit | None  # None: neither auth nor the admin API is on
    # Each alias's resolved model spec: prices, context window, output cap, tokenizer.
    catalog: Catalog
    # The prompt-cache optimizers' findings and metrics, shared by every alias.
    prompt_cache: PromptCacheState
    # The responses `/v1/responses` kept, for `previous_response_id` and GET/DELETE.
    responses: ResponseStore
    # Spend made for no client request (cascades' and routes' shadow calls), priced into the
    # ledger.
    own_spend: OwnSpend
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    # Tokenizers by name, each built once (tiktoken encodings, tokenizer.json files, GGUF
    # vocabularies): every lever that counts tokens shares them.
    tokenizers: Tokenizers = field(default_factory=Tokenizers)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        models: Mapping[str, Model],
        clock: Clock,
        registry: CollectorRegistry,
        ledger: LedgerMetrics | None = None,
    ) -> Shared:
        # First: a catalog error stops start-up before anything is opened.
        catalog = Catalog.build(settings)
        closers: list[Callable[[], Awaitable[None]]] = []
        traffic = TrafficState.build(
            settings.traffic, clock=clock, registry=registry, closers=closers
        )
        cache = None
        if settings.cache.enabled:
            cache = CacheState.build(
                settings.cache,
                models=models,
                clock=clock,
                registry=registry,
                closers=closers,
                routed=frozenset(r.name for r in settings.routing.routes),
            )
        jobs: list[Job] = []
        keys = build_keys(settings, clock=clock, limit_store=traffic.store,
                          metrics=traffic.metrics, closers=closers, jobs=jobs)  # fmt: skip
        responses = build_response_store(settings, clock=clock)
        closers.append(responses.aclose)
        return cls(
            clock=clock,
            responses=responses,
            own_spend=OwnSpend(Ledger(catalog), ledger),
            registry=registry,
            seeds=Seeds(settings.traffic.seed),
            traffic=traffic,
            cache=cache,
            keys=keys,
            catalog=catalog,
            prompt_cache=PromptCacheState(settings.prompt_cache, registry=registry),
            closers=closers,
            jobs=jobs,
        )

    def rng(self) -> random.Random:
        return self.seeds.rng()

    async def aclose(self) -> None:
        for close in self.closers:
            await close()
