"""The levers that need the prompt's text, replayed through the gateway's own layers before the
fast replay prices them (analyze/replay.py): per configuration, which requests the semantic
cache answers (analyze/semantic.py), which alias a route or a cascade sends each to
(analyze/route.py, cascade.py), and what trimming leaves out (analyze/trim.py), as `Effect`s
(analyze/effects.py), in the pipeline's order: semantic cache, route, cascade, then the trim of
the alias that answers.

Only the body levers the candidate changes are replayed, each once per distinct setting (the
baseline's, the candidate's), and only over requests with a body. Their embeddings are computed
once, in batches, by the gateway's own embedders, with progress: that is the slow part (the
local MiniLM embeds ~100-300 prompts a second on one core). A lever whose layer cannot be built
(a router file that does not load, an `upstream` embedder that would call a provider) is not
evaluable, with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.analyze.calls import Queued, queue_waits
from levergate.analyze.effects import Effect, merged
from levergate.analyze.inputs import Req
from levergate.analyze.plan import BODY_LEVERS, Plan
from levergate.analyze.quality import semantic_quality
from levergate.config import LocalEmbeddingsSettings
from levergate.core.embedder import Embedder
from levergate.errors import LevergateError

__all__ = ["BodyRun", "Embedders", "replay_bodies"]

Say = Callable[[str], None]
PART = {"semantic": "semantic", "route": "routing", "trim": "trim", "cascade": "cascade"}


@dataclass(frozen=True)
class Embedders:
    """The embedders to use instead of the gateway's default ones (tests, benchmarks)."""

    semantic: Embedder | None = None
    route: Embedder | None = None


@dataclass
class BodyRun:
    """One configuration's body levers: the effects, and what was measured of each lever."""

    effects: dict[int, Effect] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)


def replay_bodies(
    plans: Sequence[Plan],
    reqs: Sequence[Req],
    *,
    levers: Sequence[str],
    latency: Any,
    say: Say,
    embedders: Embedders | None = None,
    labels: Sequence[dict[str, Any]] = (),
) -> tuple[list[BodyRun], dict[str, str]]:
    """Each plan's `BodyRun` (over `levers`, the changed body levers), and the levers that could
    not be evaluated, with why."""
    replayer = _Bodies(reqs, latency=latency, say=say, embedders=embedders or Embedders(),
                       labels=labels)  # fmt: skip
    wanted = [lever for lever in BODY_LEVERS if lever in levers]
    problems: dict[str, str] = {}
    for lever in wanted:
        why = replayer.prepare(lever, plans)
        if why is not None:
            problems[lever] = why
    live = [lever for lever in wanted if lever not in problems]
    runs = [replayer.plan(plan, live) for plan in plans]
    replayer.close()
    return runs, problems


class _Unused:
    """The embedder of a replay no request will ask (no request to a learned route)."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise LookupError(f"no text was expected ({len(texts)} asked)")


class _Bodies:
    def __init__(
        self, reqs: Sequence[Req], *, latency: Any, say: Say, embedders: Embedders,
        labels: Sequence[dict[str, Any]],
    ) -> None:  # fmt: skip
        self.reqs, self.latency, self.say, self.labels = reqs, latency, say, labels
        self.embedders = embedders
        self.primed: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}  # one text's embedding, timed here
        self.done: dict[tuple[Any, ...], Any] = {}
        self.closers: list[Any] = []

    # ---- embeddings, once, before any replay ----------------------------------------------

    def prepare(self, lever: str, plans: Sequence[Plan]) -> str | None:
        """Prime the lever's embedder over every setting the plans give it; why it cannot run."""
        try:
            if lever == "semantic":
                return self._prime_semantic(plans)
            if lever == "route":
                return self._prime_route(plans) or self._build_routes(plans)
        except (LevergateError, OSError, ImportError, ValueError) as exc:
            return f"its layer cannot be built offline: {exc}"
        return None

    def _prime_semantic(self, plans: Sequence[Plan]) -> str | None:
        from levergate.analyze.calls import Primed
        from levergate.analyze.semantic import candidates

        texts: list[str] = []
        for plan in plans:
            if plan.semantic is None:
                continue
            if plan.semantic.semantic.embedder == "upstream" and self.embedders.semantic is None:
                return ("cache.semantic.embedder 'upstream' embeds through a provider's "
                        "embeddings API: not called offline")  # fmt: skip
            texts += candidates(plan.semantic, self.reqs).values()
        embedder = self.embedders.semantic
        if embedder is None:
            from levergate.upstreams.embeddings_local import default_embedder

            local = default_embedder()
            self.closers.append(local.aclose)
            embedder = local
        primed = Primed(embedder)
        asyncio.run(primed.prime(texts, say=self.say, what="semantic cache"))
        self.primed["semantic"] = primed
        self.seconds["semantic"] = asyncio.run(primed.timed(texts))
        return None

    def _prime_route(self, plans: Sequence[Plan]) -> str | None:
        from levergate.analyze.calls import Primed
        from levergate.analyze.route import learned_texts

        texts: list[str] = []
        settings = None
        for plan in plans:
            if plan.routing is not None:
                texts += learned_texts(plan.routing, self.reqs)
                settings = settings or plan.routing.embeddings
        if not texts:  # no request reaches a learned router: nothing to embed, nor to load
            self.primed["route"] = Primed(self.embedders.route or _Unused())
            return None
        embedder = self.embedders.route
        if embedder is None and settings is not None:
            from levergate.upstreams.embeddings_local import LocalEmbedder

            local = LocalEmbedder(settings)
            self.closers.append(local.aclose)
            embedder = local
        if embedder is None:
            return None
        primed = Primed(embedder)
        asyncio.run(primed.prime(texts, say=self.say, what="learned router"))
        self.primed["route"] = primed
        self.seconds["route"] = asyncio.run(primed.timed(texts))
        return None

    def _build_routes(self, plans: Sequence[Plan]) -> str | None:
        """Build each plan's route layer once on no requests: a router file that does not load
        or fit is the start-up error, before any replay."""
        from levergate.analyze.route import replay_routes

        for plan in plans:
            if plan.routing is not None and plan.settings is not None:
                replay_routes(plan.routing, plan.settings, [], embedder=self.primed.get("route"))
        return None

    # ---- one plan -----------------------------------------------------------------------------

    def plan(self, plan: Plan, levers: Sequence[str]) -> BodyRun:
        run = BodyRun()
        aliases: dict[int, str] = {}
        for lever in ("semantic", "route", "cascade", "trim"):
            if lever not in levers:
                continue
            part = getattr(plan, PART[lever])
            if part is None or plan.settings is None:
                continue
            key = (lever, id(part), id(plan.settings),
                   tuple(sorted(aliases.items())) if lever == "trim" else ())  # fmt: skip
            if key not in self.done:
                self.say(f"replaying {lever} over {len(self.reqs):,} requests")
                self.done[key] = self._one(lever, part, plan, aliases)
            effects, measured, notes = self.done[key]
            for at, effect in effects.items():
                run.effects[at] = merged(run.effects.get(at), effect)
                if effect.alias is not None:
                    aliases[at] = effect.alias
            run.measured[lever] = measured
            if notes:
                run.notes[lever] = notes
        return run

    def _one(
        self, lever: str, part: Any, plan: Plan, aliases: dict[int, str]
    ) -> tuple[dict[int, Effect], dict[str, Any], list[str]]:
        settings, reqs = plan.settings, self.reqs
        assert settings is not None  # noqa: S101 - checked by the caller
        if lever == "semantic":
            from levergate.analyze.semantic import candidates, replay_semantic

            primed, embed = self.primed["semantic"], self.seconds.get("semantic", 0.0)
            wanted = candidates(part, reqs)
            done = replay_semantic(part, settings, reqs, wanted, embedder=primed,
                                   latency=self.latency)  # fmt: skip
            queued = Queued(primed, first=embed, most=LocalEmbeddingsSettings().batch_max)
            waits = queue_waits([(at, reqs[at].arrival, t) for at, t in wanted.items()], queued)
            measured = semantic_quality(part, len(done.hits))
            measured.update(looked_up=done.looked_up, hits=len(done.hits), embed_seconds=embed)
            looked = {at: Effect(semantic=at in done.hits, seconds=waits.get(at, embed))
                      for at in wanted}  # fmt: skip
            return looked, measured, done.notes
        if lever == "route":
            from levergate.analyze.route import live_retention, replay_routes

            routed = replay_routes(part, settings, reqs, embedder=self.primed.get("route"),
                                   first=self.seconds.get("route", 0.0))  # fmt: skip
            return routed.effects, {
                "decided": routed.decided, "chosen": routed.chosen, "learned": routed.quality,
                "live": live_retention(self.labels),
            }, []  # fmt: skip
        if lever == "cascade":
            from levergate.analyze.cascade import replay_cascades

            c = replay_cascades(part, settings, reqs)
            return c.effects, {
                "cascaded": c.cascaded, "known": c.known, "escalated": c.escalated,
                "escalation_rate": c.escalation_rate, "unknown": c.unknown,
            }, []  # fmt: skip
        from levergate.analyze.trim import replay_trim

        t = replay_trim(part, settings, reqs, aliases)
        return t.effects, {"seen": t.seen, "trimmed": t.trimmed, "tokens": t.tokens,
                           "refused": t.refused, "capped": t.capped,
                           "output_cut": t.output_cut}, t.notes  # fmt: skip

    def close(self) -> None:
        async def shut() -> None:
            for close in self.closers:
                await close()

        if self.closers:
            asyncio.run(shut())
