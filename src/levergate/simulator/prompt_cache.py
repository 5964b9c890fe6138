"""Provider prompt-cache emulation, OpenAI's convention.

A prompt of at least `min_tokens` (1024) tokens is cut at every `min_tokens + k * increment`
token boundary (1024, 1152, 1280, ...); each prefix is identified by a running blake2b digest
over the rendered prompt, scoped by API key and model. A later request whose prompt starts
with a remembered prefix reports the longest such prefix as `cached_tokens` (counted inside
`prompt_tokens`), and the latency model skips prefill for them. Exact prefix match only: a
changed character anywhere before a boundary changes every digest after it.

Entries live in a bounded LRU with a TTL (a hit refreshes them), like a provider's cache that
forgets idle prefixes after minutes. Time is passed in.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from levergate.simulator.settings import PromptCacheSettings
from levergate.simulator.tokens import CHARS_PER_TOKEN


def prefix_digests(*, scope: str, text: str, settings: PromptCacheSettings) -> list[bytes]:
    """The digest of every cacheable prefix of `text`, shortest first. Only whole tokens count,
    so a boundary never falls past the end of the text. Linear in the prompt length."""
    whole_tokens = len(text) // CHARS_PER_TOKEN
    if whole_tokens < settings.min_tokens:
        return []
    running = hashlib.blake2b(scope.encode(), digest_size=16, person=b"lg-sim-pcache")
    digests: list[bytes] = []
    start = 0
    for boundary in range(settings.min_tokens, whole_tokens + 1, settings.increment):
        end = boundary * CHARS_PER_TOKEN
        running.update(text[start:end].encode())
        digests.append(running.digest())
        start = end
    return digests


def boundary_tokens(*, index: int, settings: PromptCacheSettings) -> int:
    """Tokens in the prefix whose digest is `prefix_digests(...)[index]`."""
    return settings.min_tokens + index * settings.increment


@dataclass(slots=True)
class CacheStats:
    lookups: int = 0
    hits: int = 0
    cached_tokens: int = 0


class PromptCache:
    """Bounded LRU of prefix digests -> expiry time."""

    def __init__(self, *, settings: PromptCacheSettings) -> None:
        self.settings = settings
        self.stats = CacheStats()
        self._entries: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup_and_store(self, *, scope: str, text: str, now: float) -> int:
        """Cached tokens for this prompt, then remember all its prefixes (refreshing TTLs)."""
        if not self.settings.enabled:
            return 0
        return self.lookup_and_store_digests(
            prefix_digests(scope=scope, text=text, settings=self.settings), now=now
        )

    def lookup_and_store_digests(self, digests: list[bytes], *, now: float) -> int:
        """`lookup_and_store` with the prompt's `prefix_digests` computed already (elsewhere:
        isolation.py)."""
        if not self.settings.enabled or not digests:
            return 0
        self.stats.lookups += 1
        cached = 0
        entries = self._entries
        for index in range(len(digests) - 1, -1, -1):
            expiry = entries.get(digests[index])
            if expiry is not None and expiry > now:
                cached = boundary_tokens(index=index, settings=self.settings)
                break
        expiry = now + self.settings.ttl_seconds
        for digest in digests:
            entries[digest] = expiry
            entries.move_to_end(digest)
        while len(entries) > self.settings.max_entries:
            entries.popitem(last=False)
        if cached:
            self.stats.hits += 1
            self.stats.cached_tokens += cached
        return cached

    # -- explicit breakpoints (Anthropic's convention, see anthropic_cache.py) -----------------
    def live(self, digest: bytes, *, now: float) -> bool:
        """Whether `digest` is remembered and not expired."""
        expiry = self._entries.get(digest)
        return expiry is not None and expiry > now

    def put(self, digest: bytes, *, expiry: float) -> None:
        """Remember (or refresh) one prefix until `expiry`, evicting the least recently used."""
        entries = self._entries
        entries[digest] = expiry
        entries.move_to_end(digest)
        while len(entries) > self.settings.max_entries:
            entries.popitem(last=False)
