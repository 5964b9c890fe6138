"""PromptCacheOptimizer: make the provider's prompt cache hit for one model alias.

PER MODEL, under Trim (breakpoints go on the prompt as it will be sent) and above Retry (every
attempt sends the same, cache-friendly body). For a chat request it

1. optionally puts the tools in canonical order (`prompt_cache.canonical_tools`, off by
   default: it changes what the model reads, though not what it means);
2. compares sampled requests of the alias to find early content that breaks prefix caching
   (`lint.py`): a metric, one log line per kind and position, a finding for the analyzer, a
   note on the trace;
3. for OpenAI, sets `prompt_cache_key` from the tenant and the first ~256 tokens (what
   OpenAI routes by), so a tenant's requests with one prefix meet the same cache machine and
   no two tenants share a key (a key the client set is kept);
4. for Anthropic, places `cache_control` breakpoints where the observed reuse pays for the
   cache writes (`breakpoints.py`), and refuses more than 4 client breakpoints with a 400
   before anything is spent.

Self-hosted engines need none of these fields: their caches are kept warm by the `affinity`
balancing strategy (policies/affinity.py), which works under this layer for any provider.
`trace.expected_cached` records the prompt tokens this layer expects the provider to read
from its cache, for the expected-against-actual metric: the leading 512-token blocks of the
prompt this alias sent within the last 5 minutes (`Recent`), when they reach the providers'
1,024-token minimum — an estimate (4 bytes a token), and an upper bound when requests of the
alias land on different cache machines.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import xxhash

from levergate.config import AnthropicUpstreamSettings, AnyUpstream, ModelSettings, UpstreamSettings
from levergate.config.prompt_cache import PromptCacheSettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.service import Answer, Layer, Service
from levergate.layers.prompt_cache.breakpoints import Placer
from levergate.layers.prompt_cache.lint import Linter
from levergate.layers.prompt_cache.state import PromptCacheState
from levergate.policies.affinity import block_digests, prompt_bytes
from levergate.policies.prefix_lint import canonical_tools

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

ROUTING_BYTES = 1024  # about the 256 tokens OpenAI routes a prompt by
BLOCK_BYTES = 2048  # about 512 tokens
RECENT_BLOCKS = 256  # the blocks of a prompt `Recent` remembers
BLOCK_TOKENS = 512
MIN_CACHED_TOKENS = 1024  # OpenAI's and most Anthropic models' minimum cacheable prompt
RECENT_SECONDS = 300.0  # how long a prefix is expected to stay cached without use
# How much larger than the JSON it was parsed from a prompt can be written again: orjson writes a
# string in at most the bytes it was read from (escapes only shorten), a number in at most 4.5x
# (`1e15` -> `1000000000000000.0`); so a body under BLOCK_BYTES / RAW_GROWTH holds no block.
RAW_GROWTH = 5


class Recent:
    """Prompt blocks this alias sent lately: what the provider may still have cached."""

    def __init__(self, *, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[int, float] = OrderedDict()

    def expected_and_note(self, data: bytes, *, now: float) -> int:
        digests = block_digests(data, block_bytes=BLOCK_BYTES, max_blocks=RECENT_BLOCKS)
        depth = 0
        for digest in digests:
            at = self._seen.get(digest)
            if at is None or now - at >= RECENT_SECONDS:
                break
            depth += 1
        for digest in digests:
            self._seen[digest] = now
            self._seen.move_to_end(digest)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        tokens = depth * BLOCK_TOKENS
        return tokens if tokens >= MIN_CACHED_TOKENS else 0


class Provider(enum.StrEnum):
    OPENAI = "openai"  # api.openai.com: prompt_cache_key
    ANTHROPIC = "anthropic"  # cache_control breakpoints
    OTHER = "other"  # self-hosted or another OpenAI-compatible provider: linting only


class PromptCacheOptimizer:
    @classmethod
    def layer(
        cls, settings: PromptCacheSettings, *, model: ModelSettings, upstreams:
        Sequence[AnyUpstream], shared: Shared,
    ) -> Layer | None:  # fmt: skip
        if not settings.enabled:
            return None
        provider = provider_of(model, {u.name: u for u in upstreams})
        return partial(
            cls,
            settings=settings,
            model=model.name,
            provider=provider,
            state=shared.prompt_cache,
            clock=shared.clock,
        )

    def __init__(
        self, inner: Service, *, settings: PromptCacheSettings, model: str, provider: Provider,
        state: PromptCacheState, clock: Clock,
    ) -> None:  # fmt: skip
        self._inner = inner
        self._settings = settings
        self._model = model
        self._state = state
        self._clock = clock
        self._linter = (
            Linter(settings.lint, model=model, findings=state.findings, counter=state.breaks)
            if settings.lint.enabled
            else None
        )
        key = settings.openai_cache_key
        self._cache_key = key == "on" or (key == "auto" and provider is Provider.OPENAI)
        b = settings.breakpoints
        self._placer = Placer(b) if b.enabled and provider is Provider.ANTHROPIC else None
        self._recent = Recent()

    def __call__(self, call: Call) -> Answer:
        if call.kind != "chat":
            return self._inner(call)
        body, now = call.body, self._clock.now()
        changes: dict[str, Any] = {}
        tools = body.get("tools")
        if self._settings.canonical_tools and isinstance(tools, list) and tools:
            changes["tools"] = canonical_tools(tools)
        sent = {**body, **changes} if changes else body  # the prompt, before any cache markers
        trace = call.ctx.trace
        raw = call.raw
        if raw is not None and not changes and len(raw) * RAW_GROWTH < BLOCK_BYTES:
            # No whole block to digest or note: the request's own JSON (`raw`, while the body
            # is unchanged) bounds its prompt's bytes, and this one's are under a block.
            trace.expected_cached = 0
        else:
            trace.expected_cached = self._recent.expected_and_note(
                prompt_bytes(sent, limit=RECENT_BLOCKS * BLOCK_BYTES), now=now
            )
        if self._linter is not None and self._linter.due(now):
            self._linter.check(sent, trace, now=now)
        if self._cache_key and "prompt_cache_key" not in body:
            changes["prompt_cache_key"] = cache_key(call.ctx.principal.tenant, sent)
        if self._placer is not None:
            placed_changes, placed = self._placer.place(sent, now=now)
            changes.update(placed_changes)
            for p in placed:
                self._state.breakpoints.labels(self._model, p.boundary.kind, p.ttl).inc()
        if changes:
            call = call.with_body(**changes)
        return self._inner(call)


def provider_of(model: ModelSettings, upstreams: Mapping[str, AnyUpstream]) -> Provider:
    """Whose prompt-cache conventions an alias's requests follow: its endpoints' provider
    (OTHER when they differ)."""
    kinds = set()
    for target in model.endpoints:
        u = upstreams[target.upstream]
        if isinstance(u, AnthropicUpstreamSettings):
            kinds.add(Provider.ANTHROPIC)
        elif isinstance(u, UpstreamSettings) and urlsplit(u.base_url).hostname == "api.openai.com":
            kinds.add(Provider.OPENAI)
        else:
            kinds.add(Provider.OTHER)
    return kinds.pop() if len(kinds) == 1 else Provider.OTHER


def cache_key(tenant: str, body: Mapping[str, Any]) -> str:
    """`prompt_cache_key` for a tenant's prompt: a hash of the tenant and the prompt's first
    ~256 tokens. Different tenants never get the same key (short of a 128-bit collision)."""
    head = prompt_bytes(body, limit=ROUTING_BYTES)[:ROUTING_BYTES]
    digest = xxhash.xxh3_128_hexdigest(tenant.encode() + b"\0" + head)
    return f"lg-{digest[:32]}"
