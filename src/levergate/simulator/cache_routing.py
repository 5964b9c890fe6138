"""OpenAI's prompt-cache routing, emulated (settings.prompt_cache.machines > 1).

OpenAI's prompt-caching guide: a request is routed to a machine by a hash of its prompt's
first ~256 tokens, combined with its `prompt_cache_key` when it has one; the cache lookup
happens on that machine only. When one prefix-and-key pair comes faster than about 15
requests a minute, some of its requests overflow to other machines, whose caches may not hold
the prefix.

Here: a pair's first `overflow_per_minute` requests in any 60 seconds go to its machine (a
hash of the pair); the ones after that go round the other machines in turn, starting from the
next one (a load balancer spreading the excess; reproducible, and the same pattern whatever
the pair's machine, so a replay that cannot compute the simulator's hash still follows it).
A machine is a scope of the simulator's
one `PromptCache` (its LRU bound covers every machine). Pairs are remembered in an LRU of
`max_entries`, each with at most `overflow_per_minute` arrival times.

`levergate analyze` replays the same rules (analyze/provider_cache.py).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque

from levergate.simulator.settings import PromptCacheSettings
from levergate.simulator.tokens import CHARS_PER_TOKEN

__all__ = ["WINDOW_SECONDS", "CacheRouter", "pair_of"]

WINDOW_SECONDS = 60.0


class _Pair:
    __slots__ = ("recent", "spilled")

    def __init__(self, limit: int) -> None:
        self.recent: deque[float] = deque(maxlen=limit)
        self.spilled = 0


class CacheRouter:
    """Which machine's cache serves a prompt (module docstring)."""

    def __init__(self, *, settings: PromptCacheSettings) -> None:
        self.settings = settings
        self.overflowed = 0
        self._pairs: OrderedDict[bytes, _Pair] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pairs)

    def scope(self, *, scope: str, text: str, key: str | None, now: float) -> str:
        """`scope` narrowed to the machine that serves `text` (unchanged with one machine)."""
        s = self.settings
        if s.machines <= 1:
            return scope
        head = text[: s.route_tokens * CHARS_PER_TOKEN]
        machine = self.route(pair_of(f"{scope}\x00{key or ''}\x00{head}"), now)
        return f"{scope}\x00m{machine}"

    def route(self, pair_id: bytes, now: float) -> int:
        """The machine for one request of the prefix-and-key pair `pair_id` (`pair_of`)."""
        s = self.settings
        if s.machines <= 1:
            return 0
        pair = self._pairs.get(pair_id)
        if pair is None:
            pair = self._pairs[pair_id] = _Pair(s.overflow_per_minute)
            while len(self._pairs) > s.max_entries:
                self._pairs.popitem(last=False)
        else:
            self._pairs.move_to_end(pair_id)
        recent = pair.recent
        while recent and recent[0] <= now - WINDOW_SECONDS:
            recent.popleft()
        home = int.from_bytes(pair_id[:8], "little") % s.machines
        if len(recent) < s.overflow_per_minute:
            recent.append(now)
            return home
        self.overflowed += 1
        pair.spilled += 1
        return (home + 1 + (pair.spilled - 1) % (s.machines - 1)) % s.machines


def pair_of(text: str) -> bytes:
    """A prefix-and-key pair's id, from a text naming the three (scope, key, prefix)."""
    return hashlib.blake2b(text.encode(), digest_size=16, person=b"lg-sim-route").digest()
