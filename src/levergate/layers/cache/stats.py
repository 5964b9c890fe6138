"""The caches' own counters, registered in the gateway's metrics registry.

Lookups by cache and outcome (hit, miss, bypass, coalesced, refresh; for the semantic cache also
rejected and unavailable), store faults by store, operation and reason (timeout, error,
cooling_down, refused), corrupt entries dropped, answers not stored and why, semantic
neighbours refused by each guard, and what hits saved: output tokens and input tokens that were
not sent upstream. One object per gateway, passed down by the pipeline; nothing global.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter

from levergate.layers.measure import hot


class CacheStats:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.lookups = Counter(
            "levergate_cache_lookups", "Cache lookups by cache and outcome.", ("cache", "outcome"),
            registry=reg,
        )  # fmt: skip
        self.faults = Counter(
            "levergate_cache_store_faults",
            "Store operations that failed and were turned into a miss or a skipped write.",
            ("store", "op", "reason"),
            registry=reg,
        )
        self.corrupt = Counter(
            "levergate_cache_corrupt_entries", "Undecodable entries found, dropped.", ("cache",),
            registry=reg,
        )  # fmt: skip
        self.not_stored = Counter(
            "levergate_cache_not_stored", "Answers not written, by reason.", ("cache", "reason"),
            registry=reg,
        )  # fmt: skip
        self.rejected = Counter(
            "levergate_cache_semantic_rejections",
            "Semantic near-neighbours above the threshold refused, by the guard that objected.",
            ("guard",),
            registry=reg,
        )
        self.saved_tokens = Counter(
            "levergate_cache_saved_tokens",
            "Tokens a hit kept from going upstream, by kind (input, output).",
            ("cache", "kind"),
            registry=reg,
        )

        # Bound children, so a hit does not pay for a label lookup on every request.
        self._children: dict[tuple[str, ...], Any] = {}
        self._saved: dict[str, tuple[Any, Any]] = {}  # by cache: (input, output)

    def fault(self, store: str, op: str, reason: str) -> None:
        """The `SafeKV` fault hook."""
        self.faults.labels(store, op, reason).inc()

    def lookup(self, cache: str, outcome: str) -> None:
        child = self._children.get((cache, outcome))
        if child is None:
            child = self.lookups.labels(cache, outcome)
            child = self._children[(cache, outcome)] = hot.counter(child)
        child.inc()

    def saved(self, cache: str, prompt: int, completion: int) -> None:
        pair = self._saved_pair(cache)
        if prompt:
            pair[0].inc(prompt)
        if completion:
            pair[1].inc(completion)

    def _saved_pair(self, cache: str) -> tuple[Any, Any]:
        pair = self._saved.get(cache)
        if pair is None:
            tokens = self.saved_tokens
            pair = (hot.counter(tokens.labels(cache, "input")),
                    hot.counter(tokens.labels(cache, "output")))  # fmt: skip
            self._saved[cache] = pair
        return pair

    def hits(self, cache: str) -> tuple[hot.Adds, hot.Adds, hot.Adds]:
        """A cache's hit counters, for a layer to keep: its lookups with outcome "hit", and the
        input and output tokens its hits saved (the very children `lookup` and `saved` add to).
        Asked for at a layer's first hit, so the series appear when they count something."""
        child = self._children.get((cache, "hit"))
        if child is None:
            child = self.lookups.labels(cache, "hit")
            child = self._children[(cache, "hit")] = hot.counter(child)
        saved_in, saved_out = self._saved_pair(cache)
        return child, saved_in, saved_out
