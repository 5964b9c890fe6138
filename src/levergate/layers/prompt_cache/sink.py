"""`PromptCacheSink`: did the provider's prompt cache hit as the optimizer expected?

A `Sink` (layers/measure/record.py) beside Prometheus and the ledger: from each finished
request's record it counts, per model alias (the one that answered),

- the prompt tokens sent (cache reads and writes included: the hit ratio's denominator),
- the prompt tokens the provider read from its cache (`tokens.cached_read`, what the ledger
  billed at the cache-read price) and wrote to it (`tokens.cache_write`),
- the prompt tokens the optimizer expected it to read (`expected_cached`, set on the trace by
  `PromptCacheOptimizer` from the blocks this alias sent lately),
- each request's outcome: `hit` (expected and read), `missed` (expected, none read: the cache
  machine was another, the entry was evicted, or no breakpoint was placed), `unexpected_hit`
  (read, not expected: a prefix another alias warmed, or the client's own breakpoints) and
  `cold` (neither).

    hit ratio      = rate(levergate_prompt_cache_read_tokens_total)
                     / rate(levergate_prompt_cache_prompt_tokens_total)
    expected share = rate(levergate_prompt_cache_read_tokens_total)
                     / rate(levergate_prompt_cache_expected_tokens_total)

The money is the ledger's: `levergate_savings_usd_total{lever="prompt_cache", model=...}` minus
`levergate_overspend_usd_total{lever="prompt_cache", model=...}` (writes not yet read back) is
the net saving by alias. The prefix breakers are `levergate_prefix_breaks_total` and the
findings of `GET /admin/prompt-cache/findings`.

The model label takes the configured alias names only (a name behind `*` comes from the
client): any other is `other`, so the series are bounded by the configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from levergate.config import WILDCARD, Settings
from levergate.layers.measure import hot
from levergate.layers.measure.labels import OTHER
from levergate.layers.measure.record import RequestRecord, Sink

OUTCOMES = ("hit", "missed", "unexpected_hit", "cold")


class PromptCacheSink:
    """`Sink`: provider prompt-cache tokens, expected and actual, by model alias."""

    name = "prompt_cache"

    @classmethod
    def of(cls, settings: Settings, *, registry: CollectorRegistry) -> Sink | None:
        """None when the optimizer or the metrics are off (nothing would read the counters)."""
        if not (settings.prompt_cache.enabled and settings.metrics.enabled):
            return None
        aliases = (m.name for m in settings.models if m.name != WILDCARD)
        return cls(aliases=aliases, registry=registry)

    def __init__(self, *, aliases: Iterable[str], registry: CollectorRegistry) -> None:
        self._aliases = frozenset(aliases)
        label = ("model",)
        self.prompt = Counter(
            "levergate_prompt_cache_prompt_tokens",
            "Prompt tokens of answered requests, cache reads and writes included (the "
            "denominator of the provider-cache hit ratio).",
            label, registry=registry,
        )  # fmt: skip
        self.read = Counter(
            "levergate_prompt_cache_read_tokens",
            "Prompt tokens the provider read from its prompt cache (billed at the cache-read "
            "price).",
            label, registry=registry,
        )  # fmt: skip
        self.written = Counter(
            "levergate_prompt_cache_write_tokens",
            "Prompt tokens the provider wrote to its prompt cache (billed at the write price).",
            label, registry=registry,
        )  # fmt: skip
        self.expected = Counter(
            "levergate_prompt_cache_expected_tokens",
            "Prompt tokens the prompt-cache optimizer expected the provider to read from its "
            "cache.",
            label, registry=registry,
        )  # fmt: skip
        self.requests = Counter(
            "levergate_prompt_cache_requests",
            "Answered requests by prompt-cache outcome: hit (expected and read), missed "
            "(expected, none read), unexpected_hit, cold.",
            ("model", "outcome"), registry=registry,
        )  # fmt: skip
        self._children: dict[str, tuple[Any, ...]] = {}

    def emit(self, record: RequestRecord) -> None:
        # Its tokens unpacked once: a `NamedTuple` field read by name is an unspecialised
        # look-up on CPython 3.11 (~100 instructions), on every request (issue 22).
        uncached, cached, cache_write, _, _, _ = record.tokens
        prompt_tokens = uncached + cached + cache_write  # `Tokens.input`
        if not prompt_tokens or record.kind == "embedding":
            return  # refused, served by a cache, or nothing a prompt cache could hold
        alias = record.answered_model
        children = self._children.get(alias) or self._bind(alias)
        prompt, read, written, expected, *outcomes = children
        prompt.inc(prompt_tokens)
        if cached:
            read.inc(cached)
        if cache_write:
            written.inc(cache_write)
        expected_cached = record.expected_cached
        if expected_cached:
            expected.inc(expected_cached)
        outcomes[outcome(expected=expected_cached, read=cached)].inc()

    def _bind(self, alias: str) -> tuple[Any, ...]:
        label = alias if alias in self._aliases else OTHER
        found = self._children.get(label)
        if found is None:
            found = tuple(hot.counter(child) for child in (
                self.prompt.labels(label),
                self.read.labels(label),
                self.written.labels(label),
                self.expected.labels(label),
                *(self.requests.labels(label, o) for o in OUTCOMES),
            ))  # fmt: skip
            self._children[label] = found
        if label != OTHER:  # an unknown name is looked up again, never remembered
            self._children[alias] = found
        return found


def outcome(*, expected: int, read: int) -> int:
    """The index in `OUTCOMES` of a request that expected and read these many tokens."""
    if read:
        return 0 if expected else 2
    return 1 if expected else 3
