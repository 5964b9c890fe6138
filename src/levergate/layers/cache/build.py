"""`CacheState`: what the cache layers share, built once per pipeline, and the semantic layer.

The store (`stores.build`), the counters, and the resolver that turns a model alias into the
model that will actually answer (part of every key, so re-pointing an alias never serves the old
model's answers). Each cache layer builds itself from it (`ExactCache.layer`,
`EmbeddingsCache.layer`); the semantic layer is built here, by `semantic_layer`, because its
module needs the `semantic` extra (numpy, an embedder) and is imported only when a rule opts in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from levergate.config import WILDCARD, CacheSettings, ModelSettings, SemanticCacheSettings, Settings
from levergate.core.call import Call, Context
from levergate.core.clock import Clock
from levergate.core.embedder import Embedder
from levergate.core.jobs import BackgroundJob
from levergate.core.reply import Completed
from levergate.core.service import Layer, Service
from levergate.errors import ConfigError, UpstreamUnavailable
from levergate.layers.cache.entries import CacheView, Entries
from levergate.layers.cache.stats import CacheStats
from levergate.stores import select
from levergate.stores.build import build_store
from levergate.stores.kv import KV
from levergate.stores.registry import StoreRegistry
from levergate.stores.select import Choice

if TYPE_CHECKING:
    from levergate.layers.cache.checks import CacheChecks
    from levergate.layers.cache.thresholds import Thresholds
    from levergate.layers.shared import Shared


@dataclass(frozen=True, slots=True)
class CacheState:
    stats: CacheStats
    store: KV
    resolve: Callable[[str, str], str]  # (alias, feature tag) -> what answers it
    # Where the entries live and the semantic index (`redis`: shared; `memory`: local), by
    # `stores.select.cache_store` and `semantic_index`; `stores` opens their Redis.
    where: Choice
    index: Choice
    stores: StoreRegistry

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        models: Mapping[str, ModelSettings],
        clock: Clock,
        registry: CollectorRegistry,
        closers: list[Callable[[], Awaitable[None]]],
        stores: StoreRegistry,
    ) -> CacheState:
        stats = CacheStats(registry)
        where = select.cache_store(settings)
        built = build_store(settings.cache.store, choice=where, registry=stores, clock=clock,
                            on_fault=stats.fault)  # fmt: skip
        closers.extend(built.closers)
        routed = frozenset(r.name for r in settings.routing.routes)
        resolve = partial(resolve_model, models, routed=routed)
        index = select.semantic_index(settings, where)
        return cls(stats=stats, store=built.kv, resolve=resolve, where=where, index=index,
                   stores=stores)  # fmt: skip

    def view(self, cache: str, settings: CacheSettings, *, remember: bool = False) -> CacheView:
        """All one cache layer is built with; its name labels the counters. `remember`: its
        entries keep the last ones decoded (`Entries`), for a layer whose hits repeat one
        entry a request (the exact cache; not the embeddings cache's thousands of inputs)."""
        entries = Entries(self.store, cache=cache, stats=self.stats, remember=remember)
        return CacheView(settings=settings, entries=entries, stats=self.stats, resolve=self.resolve)


def semantic_layer(
    settings: CacheSettings, *, shared: Shared, routes: Service, embedder: Embedder | None
) -> Layer | None:
    """The semantic cache layer, or None when the cache is off or no rule opts in (then
    nothing is loaded). `routes` is the service under the front layers: the upstream embedder
    and the verification call go through it."""
    state = shared.cache
    rules = [settings.default, *settings.models.values(), *settings.features.values()]
    if state is None or not any(rule.semantic for rule in rules):
        return None
    # Imported here: numpy and the embedder are the `semantic` extra, needed only when on.
    from levergate.layers.cache.semantic import SemanticCache
    from levergate.stores.vector import PartitionedIndex, Partitions

    options = settings.semantic
    if state.index.backend == "redis" and state.where.backend == "memory":
        raise ConfigError(
            "cache.semantic.index 'redis' shares the index between replicas, but with "
            "cache.store.backend 'memory' no replica can load another's entries: set "
            "cache.store.backend to 'redis' (or stores.default.redis_url)"
        )
    if embedder is None:
        embedder = _default_embedder(options, routes, shared.closers)
    local = PartitionedIndex(max_entries=options.max_entries, hnsw_above=options.hnsw_above)
    index: Partitions = local
    if state.index.backend == "redis":
        from levergate.stores.vector_redis import connect

        client = state.stores.redis(state.index, what="cache.semantic.index")
        follower = connect(local, client=client, store=settings.store, options=options,
                           clock=shared.clock, on_fault=state.stats.fault)  # fmt: skip
        shared.jobs.append(BackgroundJob("semantic_index", follower.run))
        shared.closers.append(follower.aclose)
        index = follower
    verify = routes if options.verify_model else None
    view = state.view("semantic", settings)
    return partial(SemanticCache, view=view, embedder=embedder, index=index, verify=verify,
                   thresholds=_thresholds(options, shared),
                   checks=_checks(options, shared))  # fmt: skip


def _thresholds(options: SemanticCacheSettings, shared: Shared) -> Thresholds:
    """The thresholds per route, from `thresholds_file` (read now: a file that does not load
    stops the start), watched when `watch_seconds` > 0."""
    from levergate.layers.cache.thresholds import Thresholds, ThresholdWatch

    thresholds = Thresholds(options.threshold)
    if options.thresholds_file is None:
        return thresholds
    watch = ThresholdWatch(options.thresholds_file, thresholds, clock=shared.clock,
                           every=options.watch_seconds, registry=shared.registry)  # fmt: skip
    watch.first()
    if options.watch_seconds > 0:
        shared.jobs.append(BackgroundJob("cache_threshold_watch", watch.run))
    return thresholds


def _checks(options: SemanticCacheSettings, shared: Shared) -> CacheChecks | None:
    """The sampled lookups' checks (None: `calibration.rate` 0)."""
    calibration = options.calibration
    if calibration.rate <= 0:
        return None
    from levergate.layers.cache.checks import CacheChecks, CheckMeter

    checks = CacheChecks.build(calibration, shared=shared, metrics=CheckMeter(shared.registry))
    checks.setup(calibration)
    return checks


class ServiceEmbedder:
    """An `Embedder` over this gateway's own routes: `/v1/embeddings` of a configured model."""

    def __init__(self, routes: Service, *, model: str) -> None:
        self._routes = routes
        self._model = model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        call = Call(kind="embedding", body={"model": self._model, "input": texts},
                    ctx=Context(request_id="semantic-cache-embed"))  # fmt: skip
        reply = await self._routes(call)
        if not isinstance(reply, Completed):
            raise UpstreamUnavailable("the embeddings route did not answer with a body")
        rows = sorted(reply.data.get("data") or [], key=lambda row: row.get("index", 0))
        vectors = [row.get("embedding") for row in rows]
        if len(vectors) != len(texts) or not all(isinstance(v, list) for v in vectors):
            raise UpstreamUnavailable("the embeddings route answered the wrong shape")
        return [[float(x) for x in v] for v in vectors if isinstance(v, list)]


def _default_embedder(
    options: SemanticCacheSettings, routes: Service, closers: list[Callable[[], Awaitable[None]]]
) -> Embedder:
    if options.embedder == "upstream":
        if not options.embedding_model:
            raise ConfigError(
                "cache.semantic.embedder 'upstream' needs cache.semantic.embedding_model"
            )
        return ServiceEmbedder(routes, model=options.embedding_model)
    try:
        from levergate.upstreams.embeddings_local import default_embedder
    except ImportError:
        raise ConfigError(
            "the local MiniLM embedder needs onnxruntime and tokenizers: pip install "
            "'levergate[semantic]', or set cache.semantic.embedder: upstream"
        ) from None
    local = default_embedder()
    closers.append(local.aclose)
    return local


def resolve_model(
    models: Mapping[str, ModelSettings],
    alias: str,
    feature: str = "",
    *,
    routed: frozenset[str] = frozenset(),
) -> str:
    """The alias and every endpoint that may answer it (`upstream/model`), for a configured alias
    or the `*` catch-all; an unknown alias stands for itself. A routed alias (`routing.routes`)
    also stands for the feature tag, which its rules may route by and the body does not carry:
    one body sent under two features may be answered by two models."""
    if alias in routed:
        return f"{alias}->route(feature={feature})"
    model = models.get(alias) or models.get(WILDCARD)
    if model is None:
        return alias
    wildcard = model.name == WILDCARD
    targets = ",".join(
        f"{t.upstream}/{alias if wildcard else t.upstream_model or model.upstream_model or alias}"
        for t in model.endpoints
    )
    return f"{alias}->{targets}"
