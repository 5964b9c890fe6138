"""`Shared`: the one value every layer of a pipeline is built from, besides its own settings.

`build_pipeline` calls `Shared.build` once; each layer's builder (`Retry.layer(settings, shared=
shared)`, ...) takes what it needs from it and returns the layer, or None when its lever is off.
So which layers exist, in what order, is written in `pipeline.py` alone, and what they share —
the clock, the metrics registry, the seeded random sources, the traffic, cache and key state, the
model catalog, the ledger's account of what the gateway spends on its own, the store
connections (one Redis pool per URL, `stores/registry.py`) — is built in one place. The two
lists collect what the built layers own: things to close when the pipeline closes, and
background jobs for `Gateway.start`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from levergate.catalog import Catalog
from levergate.config import WILDCARD, ModelSettings, Settings
from levergate.core.clock import Clock
from levergate.core.jobs import BackgroundJob
from levergate.core.tokenizer import TextTokenizer
from levergate.layers.cache.build import CacheState
from levergate.layers.keys.build import KeyKit, build_keys
from levergate.layers.measure.ledger import Ledger, LedgerMetrics, OwnSpend
from levergate.layers.measure.shadow_labels import ShadowLabels
from levergate.layers.prompt_cache.state import PromptCacheState
from levergate.layers.tiers.book import TierBook
from levergate.layers.traffic.agreement import agreement_job
from levergate.layers.traffic.state import TrafficState
from levergate.protocol.tokens import Tokenizers
from levergate.stores import select
from levergate.stores.registry import StoreRegistry
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
    # The store connections every store above was opened on: one Redis pool per URL, closed
    # after every closer.
    stores: StoreRegistry
    # What was seen of each model's service tiers: latencies and refusals (layers/tiers/).
    tiers: TierBook
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    jobs: list[BackgroundJob] = field(default_factory=list)
    # Tokenizers by name, each built once (tiktoken encodings, tokenizer.json files, GGUF
    # vocabularies): every lever that counts tokens shares them.
    tokenizers: Tokenizers = field(default_factory=Tokenizers)
    # Every compared shadow sample (routes', cascades'), for the features that keep them as
    # labels (the request log, through `Recorder.shadow_labels`).
    shadow_labels: ShadowLabels = field(default_factory=ShadowLabels)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        models: Mapping[str, ModelSettings],
        clock: Clock,
        registry: CollectorRegistry,
        ledger: LedgerMetrics | None = None,
    ) -> Shared:
        # First: a catalog error stops start-up before anything is opened.
        catalog = Catalog.build(settings)
        closers: list[Callable[[], Awaitable[None]]] = []
        stores = StoreRegistry.build(settings)
        traffic = TrafficState.build(settings.traffic, clock=clock, registry=registry,
                                     closers=closers, choice=select.limits(settings),
                                     stores=stores)  # fmt: skip
        cache = None
        if settings.cache.enabled:
            cache = CacheState.build(settings, models=models, clock=clock, registry=registry,
                                     closers=closers, stores=stores)  # fmt: skip
        jobs: list[BackgroundJob] = []
        agreement = agreement_job(settings, choice=select.limits(settings), stores=stores)
        jobs.extend([agreement] if agreement else [])
        keys = build_keys(settings, clock=clock, limit_store=traffic.store,
                          metrics=traffic.metrics, closers=closers, jobs=jobs,
                          stores=stores)  # fmt: skip
        responses = build_response_store(settings, clock=clock, registry=stores)
        closers.append(responses.aclose)
        return cls(
            stores=stores,
            clock=clock,
            responses=responses,
            own_spend=OwnSpend(Ledger(catalog), ledger),
            registry=registry,
            seeds=Seeds(settings.traffic.seed),
            traffic=traffic,
            cache=cache,
            keys=keys,
            catalog=catalog,
            tiers=TierBook(settings.tiers, catalog=catalog, clock=clock),
            prompt_cache=PromptCacheState(settings.prompt_cache, registry=registry),
            closers=closers,
            jobs=jobs,
        )

    def rng(self) -> random.Random:
        return self.seeds.rng()

    async def aclose(self) -> None:
        for close in self.closers:
            await close()
        await self.stores.aclose()


def alias_tokenizer(
    model: ModelSettings, *, wanted: str, catalog: Catalog, tokenizers: Tokenizers
) -> TextTokenizer | None:
    """The tokenizer an alias's tokens are counted with (Trim's and CountUsage's): `wanted`
    (a setting's name), else the catalog's for the model (an entry with no public tokenizer is
    estimated, and says so), else tiktoken's by the name it is sent under, else the estimate.
    None for `*` left on `auto`: it serves many names, and each request's own decides. Loading
    one may raise ImportError, OSError or ValueError (a missing file, an unknown name)."""
    spec = catalog.spec(model.name)
    if wanted == "auto" and spec.tokenizer:
        wanted = "estimate" if spec.tokenizer == "none" else spec.tokenizer
    if model.name == WILDCARD and wanted == "auto":
        return None
    name = model.upstream_model or model.endpoints[0].upstream_model or model.name
    return tokenizers.resolve(wanted, model=name)
