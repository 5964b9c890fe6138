"""Routing replayed: the gateway's own `Route` layer (layers/route.py: the route's rules in order,
then its learned router at the threshold it serves, then its default), built from the settings
as the pipeline builds it, decides each logged request that asked for a route's name. A request
it sends to another alias than the one that answered in the log is priced at that alias and
timed by that alias's fitted latency model (analyze/effects.py); output tokens are taken as
logged (the other model's answer length is not known).

The learned routers' embedder is the gateway's own (`routing.embeddings`, the local MiniLM), its
vectors computed beforehand in batches. Each learned route's quality is measured, not assumed:
the router file's out-of-fold curve at the served threshold (what
`levergate_router_quality_retention` exports), with the live retention of the log's shadow
labels (`lg_labels`, what `levergate_route_quality_retention` counts) beside it when the input
has them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.analyze.calls import Primed, Queued, answer, call_of, models_of, shared_of
from levergate.analyze.effects import Effect
from levergate.analyze.inputs import Req
from levergate.config import RoutingSettings, Settings
from levergate.core.call import Call
from levergate.core.clock import SystemClock
from levergate.core.embedder import Embedder
from levergate.core.reply import Reply
from levergate.errors import LevergateError
from levergate.layers.route import Route, serving_threshold
from levergate.policies import routing as rules
from levergate.testing import run_virtual

__all__ = ["Routed", "learned_texts", "replay_routes"]


@dataclass
class Routed:
    effects: dict[int, Effect] = field(default_factory=dict)
    decided: int = 0
    chosen: dict[str, int] = field(default_factory=dict)  # alias -> requests
    quality: dict[str, dict[str, Any]] = field(default_factory=dict)  # per learned route
    refused: int = 0  # the layer refused the request (a 400): left as logged


def learned_texts(routing: RoutingSettings, reqs: Sequence[Req]) -> list[str]:
    """What each learned route's embedder will be asked to embed (to prime it)."""
    from levergate.routing.features import embed_text
    from levergate.routing.model import load

    found: list[str] = []
    for spec in routing.routes:
        if spec.learned is None:
            continue
        router, _ = load(spec.learned.file)
        chars = router.features.text_chars
        found += [embed_text(rules.last_user_text(r.payload), text_chars=chars)
                  for r in reqs if r.payload is not None and r.model == spec.name]  # fmt: skip
    return found


def replay_routes(
    routing: RoutingSettings, settings: Settings, reqs: Sequence[Req], *,
    embedder: Embedder | None, first: float = 0.0,
) -> Routed:  # fmt: skip
    """Each request to a route decided by the layer (module docstring), in arrival order on a
    virtual clock; a learned router's score waits for the embedder as the request path does
    (`Queued`: `first` seconds for one text). A router file that does not load, or was trained
    for other models, is the `ConfigError` start-up would raise."""
    if isinstance(embedder, Primed):
        embedder = Queued(embedder, first=first, most=routing.embeddings.batch_max)
    found: Routed = run_virtual(_decide(routing, settings, reqs, embedder))
    return found


async def _decide(
    routing: RoutingSettings, settings: Settings, reqs: Sequence[Req], embedder: Embedder | None
) -> Routed:
    found = Routed()
    names = {r.name for r in routing.routes}
    shared = shared_of(settings, SystemClock())
    try:
        make = Route.layer(routing, models=models_of(settings), shared=shared,
                           embedder=embedder)  # fmt: skip
        if make is None:
            return found
        loop = asyncio.get_running_loop()
        sent: dict[int, tuple[str, float]] = {}  # the alias, the seconds the layer took
        started: dict[int, float] = {}

        async def upstream(call: Call) -> Reply:
            at = int(call.ctx.request_id)
            sent[at] = (call.model, loop.time() - started[at])
            return answer(reqs[at], alias=call.model)

        layer = make(upstream)
        calls: dict[int, Call] = {}
        tasks = []
        start = reqs[0].arrival if reqs else 0.0
        for at, req in enumerate(reqs):
            call = call_of(at, req) if req.model in names else None
            if call is None:
                continue
            if (wait := req.arrival - start - loop.time()) > 0:
                await asyncio.sleep(wait)
            started[at], calls[at] = loop.time(), call
            tasks.append(asyncio.create_task(layer(call)))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for (at, call), result in zip(calls.items(), results, strict=True):
            if isinstance(result, LevergateError):  # a 400: as the log has it
                found.refused += 1
                continue
            if isinstance(result, BaseException):
                raise result
            _decided(found, at, reqs[at], call, sent.get(at))
        found.quality = _quality(routing)
    finally:
        await shared.aclose()
    return found


def _decided(found: Routed, at: int, req: Req, call: Call, sent: tuple[str, float] | None) -> None:
    chosen, took = sent if sent is not None else (req.alias, 0.0)
    found.decided += 1
    found.chosen[chosen] = found.chosen.get(chosen, 0) + 1
    decision = call.ctx.trace.route
    scored = took if decision is not None and decision.router == "learned" else 0.0
    if chosen != req.alias or scored:
        found.effects[at] = Effect(alias=chosen if chosen != req.alias else None, seconds=scored)


def _quality(routing: RoutingSettings) -> dict[str, dict[str, Any]]:
    """Each learned route's measured retention and strong share at its serving threshold."""
    from levergate.routing.model import load

    found: dict[str, dict[str, Any]] = {}
    for spec in routing.routes:
        if spec.learned is None:
            continue
        router, _ = load(spec.learned.file)
        threshold = serving_threshold(router, spec.learned)
        kept, strong = router.measured_at(threshold)
        found[spec.name] = {"file": spec.learned.file, "threshold": threshold,
                            "retention": kept, "strong_share": strong,
                            "cheap": spec.learned.cheap, "strong": spec.learned.strong}  # fmt: skip
    return found


def live_retention(labels: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per route, the log's shadow labels (`label_counts` rows of layer "route"): compared,
    agreeing, and the share agreeing; or a running gateway's
    `levergate_route_quality_retention` (rows with a `gauge`)."""
    found: dict[str, dict[str, Any]] = {}
    for row in labels:
        if row.get("layer") != "route":
            continue
        if "gauge" in row:
            found[str(row["name"])] = {"gauge": float(row["gauge"])}
            continue
        one = found.setdefault(str(row["name"]), {"labels": 0, "agree": 0})
        one["labels"] += int(row["labels"])
        one["agree"] += int(row["agree"])
    for one in found.values():
        if "labels" in one:
            one["agreement"] = one["agree"] / one["labels"] if one["labels"] else None
    return found
