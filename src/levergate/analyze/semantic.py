"""The semantic cache replayed: the gateway's own `SemanticCache` layer (layers/cache/semantic.py:
its partition key, rule, namespaces, guards, index, threshold and top-k), in arrival order on a
virtual clock, with the gateway's own embedder (the local MiniLM), its vectors computed
beforehand in batches (`Primed`). Which requests hit is decided with the lookups taking no time,
so a request follows the answers that completed before it arrived in the log, as a client that
waited for them would; what the lookups add to each request (the embedder's queue) is timed
apart (`calls.queue_waits`).

Every request with a body is started at its arrival time on a `VirtualTimeLoop`; a miss goes on
to an inner service that takes the request's logged time (or its model's) and answers with its
logged tokens, and the layer stores that answer as it stores any: when it completes, for the
rule's TTL, bounded by `cache.semantic.max_entries`. A request the inner service never sees was
a hit. What cannot run offline is said (`Semantic.notes`): an `upstream` embedder (a provider's
embeddings API) is not called, and `verify_model`'s check is not asked (its hits counted as if
it said yes).

The exact cache sits in front of this layer in the gateway: a request it answers never reaches
the semantic cache. The replay (analyze/replay.py) checks the exact cache first, so such a
request stays an exact hit; here it is a semantic hit at similarity 1, which stores nothing,
as the exact hit stores nothing here either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from prometheus_client import CollectorRegistry

from levergate.analyze.calls import answer, call_of, models_of
from levergate.analyze.effects import Effect
from levergate.analyze.fit import Latency
from levergate.analyze.inputs import Req
from levergate.config import CacheSettings, Settings
from levergate.core.call import Call
from levergate.core.embedder import Embedder
from levergate.core.reply import Reply
from levergate.layers.cache.build import resolve_model
from levergate.layers.cache.entries import CacheView, Entries
from levergate.layers.cache.semantic import SemanticCache, final_user_text
from levergate.layers.cache.stats import CacheStats
from levergate.policies.cache_policy import bypass_reason, rule_for
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import LoopClock, run_virtual

__all__ = ["Semantic", "candidates", "replay_semantic"]


@dataclass
class Semantic:
    """The replay's result: the requests the semantic cache answered, of those it looked up."""

    hits: dict[int, Effect] = field(default_factory=dict)
    looked_up: int = 0
    notes: list[str] = field(default_factory=list)


def candidates(cache: CacheSettings, reqs: Sequence[Req]) -> dict[int, str]:
    """The requests the layer would look up (a chat body whose rule opts in and does not bypass
    the cache, ending in a user's plain text), with that text."""
    found: dict[int, str] = {}
    for index, req in enumerate(reqs):
        body = req.payload
        if body is None or not isinstance(body.get("messages"), list):
            continue
        rule = rule_for(cache, model=req.model, feature=req.feature)
        text = final_user_text(body)
        if rule.semantic and text is not None and bypass_reason(rule, body) is None:
            found[index] = text
    return found


def replay_semantic(
    cache: CacheSettings,
    settings: Settings,
    reqs: Sequence[Req],
    wanted: dict[int, str],
    *,
    embedder: Embedder,
    latency: Latency,
) -> Semantic:
    """The semantic cache over `wanted` (`candidates`), in virtual time (module docstring)."""
    found = Semantic(looked_up=len(wanted))
    verify = cache.semantic.verify_model
    if verify:
        found.notes.append(f"cache.semantic.verify_model ({verify}) is a model call: not "
                           "asked offline, its hits counted as if it said yes")  # fmt: skip
    reached: set[int] = set()
    run_virtual(_drive(cache, settings, reqs, sorted(wanted), embedder=embedder,
                       latency=latency, reached=reached))  # fmt: skip
    found.hits = {i: Effect(semantic=True) for i in wanted if i not in reached}
    return found


async def _drive(
    cache: CacheSettings, settings: Settings, reqs: Sequence[Req], order: list[int], *,
    embedder: Embedder, latency: Latency, reached: set[int],
) -> None:  # fmt: skip
    loop = asyncio.get_running_loop()
    clock = LoopClock()
    stats = CacheStats(CollectorRegistry())
    store = MemoryKV(max_bytes=cache.store.memory_bytes, clock=clock)
    routed = frozenset(r.name for r in settings.routing.routes)
    view = CacheView(settings=cache, entries=Entries(store, cache="semantic", stats=stats,
                                                     wall=loop.time),
                     stats=stats, resolve=partial(resolve_model, models_of(settings),
                                                  routed=routed))  # fmt: skip
    from levergate.stores.vector import PartitionedIndex

    index = PartitionedIndex(max_entries=cache.semantic.max_entries,
                             hnsw_above=cache.semantic.hnsw_above)  # fmt: skip

    async def upstream(call: Call) -> Reply:
        at = int(call.ctx.request_id)
        reached.add(at)
        req = reqs[at]
        took = req.total if req.total is not None else latency.total(req.prompt, req.output)
        await asyncio.sleep(max(0.0, took))
        return answer(req)

    layer = SemanticCache(upstream, view=view, embedder=embedder, index=index)
    if not order:
        return
    start = reqs[order[0]].arrival
    tasks = []
    for at in order:
        req = reqs[at]
        call = call_of(at, req)
        if call is None:
            continue
        wait = req.arrival - start - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(layer(call)))
    await asyncio.gather(*tasks)
