"""The providers' prompt caches as the replay models them: the simulator's own rules
(simulator/prompt_cache.py, cache_routing.py, anthropic_cache.py) applied to the request log's
digests instead of the prompts' text.

OpenAI's convention (`OpenAICache`): every prefix of at least `min_tokens` is cached, read back
in `increment`-token steps within `ttl_seconds` (a hit refreshes it). With `machines` > 1, a
prompt is served by one machine's cache, chosen by its first ~256 tokens and its
`prompt_cache_key` (the simulator's `CacheRouter`, reused here as is: the first 1 KB block's
digest names the prefix OpenAI routes by, and the key is the client's own (`pck`) or, when the
configuration sets it, the gateway's: a digest of the tenant and that same first 1 KB, so the
tenant stands for it). A pair sent faster than `overflow_per_minute` overflows to other
machines. Prefixes are whole 1 KB blocks (~256 tokens), so a prediction is exact to a block.

Anthropic's convention (`AnthropicCache`): only behind breakpoints. The gateway's breakpoint
layer is replayed by its own `Placer.decide` on the logged boundaries (requestlog/features.py's
`bp`, `cont`, `whole`), one per alias as in the gateway; then, as the simulator's `account`:
the longest placed prefix still cached is read (refreshed), the placed ones after it written at
their TTL (5 minutes or 1 hour), the rest of the prompt uncached. A boundary's tokens are its
bytes at the request's own tokens per byte.

Bounded as the simulator bounds it: one LRU per endpoint and convention, of the provider's
`max_entries` (the simulator keeps one LRU per convention over every key and model, each entry
one 128-token step or one breakpoint). A replayed block stands for several of the simulator's
entries (its tokens / `increment`, as the endpoint's first prompt has them: ~2 for a logged
1 KB block, 4 for a trace's 512-token one), so an endpoint's LRU holds `max_entries` / that
many blocks; the least recently used are evicted past it, after a prompt is stored, as the
simulator does. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import repeat

from levergate.analyze.inputs import Req
from levergate.config.prompt_cache import BreakpointsSettings
from levergate.layers.prompt_cache.breakpoints import Boundary, Placer
from levergate.policies.prompt_cache import Ttl
from levergate.simulator.cache_routing import CacheRouter, pair_of
from levergate.simulator.settings import PromptCacheSettings

__all__ = ["AnthropicCache", "Bounded", "OpenAICache", "Usage"]

TTL_SECONDS = {Ttl.FIVE_MINUTES: 300.0, Ttl.ONE_HOUR: 3600.0}


@dataclass(frozen=True, slots=True)
class Usage:
    """Prompt tokens read from and written to a provider cache (`written_1h` within
    `written`)."""

    read: int = 0
    written: int = 0
    written_1h: int = 0


class Bounded:
    """An LRU of at most `capacity` entries (key -> expiry), the least recently used evicted."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.evicted = 0  # entries evicted for room, ever
        self._entries: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def live(self, key: Hashable, now: float) -> bool:
        expiry = self._entries.get(key)
        return expiry is not None and expiry > now

    def read_and_store(self, keys: Sequence[Hashable], now: float, expiry: float) -> int:
        """How many leading `keys` the longest live one of them ends (0: none), then `keys`
        remembered (or refreshed) in order until `expiry` and the least recently used evicted
        past the bound: the simulator's `lookup_and_store`. After evictions the shortest
        prefixes of a prompt go first, so the longest live one need not end a leading run."""
        entries = self._entries
        held = list(filter(entries.__contains__, keys))  # in C: most prompts share little
        depth = 0
        for key in reversed(held):
            if entries[key] > now:
                depth = keys.index(key) + 1
                break
        for key in held:  # refreshed ones go to the end, in the prompt's order, with the rest
            del entries[key]
        entries.update(zip(keys, repeat(expiry)))
        self._evict()
        return depth

    def put(self, key: Hashable, expiry: float) -> None:
        """Remember (or refresh) one entry, then evict past the bound."""
        entries = self._entries
        entries[key] = expiry
        entries.move_to_end(key)
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        excess = len(entries) - self.capacity
        if excess > 0:
            popitem = entries.popitem
            for _ in range(excess):
                popitem(last=False)
            self.evicted += excess


class OpenAICache:
    """One endpoint's OpenAI-convention cache (module docstring)."""

    def __init__(self, provider: PromptCacheSettings) -> None:
        self.provider = provider
        self.lru: Bounded | None = None  # sized by the first prompt's block (`cached`)
        self.router = CacheRouter(settings=provider)

    def cached(self, scope: str, req: Req, *, key: str | None, now: float) -> int:
        """Cached tokens of `req` (then all its prefixes remembered), `key` its
        prompt_cache_key (None: none)."""
        p = self.provider
        if req.prompt < p.min_tokens or not req.blocks:
            return 0
        if p.machines > 1:
            machine = self.router.route(pair_of(f"{scope}\x00{key or ''}\x00{req.blocks[0]}"), now)
            scope = f"{scope}\x00m{machine}"
        lru = self.lru
        if lru is None:  # a block stands for its tokens / `increment` of the simulator's entries
            lru = self.lru = Bounded(p.max_entries // max(1, round(req.block_tokens / p.increment)))
        keys = [(scope, digest) for digest in req.blocks]
        depth = lru.read_and_store(keys, now, now + p.ttl_seconds)
        reach = min(depth * req.block_tokens, req.prompt - 1)
        if reach < p.min_tokens:
            return 0
        return int(p.min_tokens + (reach - p.min_tokens) // p.increment * p.increment)


class AnthropicCache:
    """One endpoint's Anthropic-convention cache behind the gateway's automatic breakpoints
    (module docstring); `placers` per alias, shared by the endpoints of one replay."""

    def __init__(
        self, provider: PromptCacheSettings, breakpoints: BreakpointsSettings,
        placers: dict[str, Placer],
    ) -> None:  # fmt: skip
        self.provider = provider
        self.breakpoints = breakpoints
        self.lru = Bounded(provider.max_entries)
        self._placers = placers

    def usage(self, scope: str, req: Req, now: float) -> Usage:
        if not req.bp or req.whole is None:
            return Usage()
        placer = self._placers.get(req.alias)
        if placer is None:
            placer = self._placers[req.alias] = Placer(self.breakpoints)
        found = [Boundary(kind, -1, -1, tokens, digest) for kind, tokens, digest in req.bp]
        placed = placer.decide(found, req.cont, req.whole, taken=req.cbp, now=now)
        per_byte = req.block_tokens / 1024.0 if req.block_tokens else 0.25
        eligible = []
        for p in placed:
            tokens = min(req.prompt, math.floor(p.boundary.tokens * 4 * per_byte))
            if tokens >= self.provider.anthropic_min_tokens:
                eligible.append((tokens, (scope, p.boundary.digest), p.ttl))
        read = 0
        for tokens, key, ttl in reversed(eligible):
            if self.lru.live(key, now):
                read = tokens
                self.lru.put(key, now + TTL_SECONDS[ttl])
                break
        written = written_1h = 0
        covered = read
        for tokens, key, ttl in eligible:
            if tokens > covered:
                written += tokens - covered
                written_1h += tokens - covered if ttl is Ttl.ONE_HOUR else 0
                covered = tokens
                self.lru.put(key, now + TTL_SECONDS[ttl])
        return Usage(read, written, written_1h)
