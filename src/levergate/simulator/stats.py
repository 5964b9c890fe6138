"""Counters the simulator keeps for tests and benchmarks (`GET /sim/stats`).

Per process: with `--workers N` each worker keeps its own, and a stats request is answered by
whichever worker accepted the connection.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

NO_KEY = "(none)"
MAX_CACHE_KEYS = 10_000  # distinct `prompt_cache_key`s remembered (beyond: counted, not kept)


def key_label(key: str | None) -> str:
    """How an API key appears in stats: short keys as they are, long ones shortened the way
    provider dashboards do (`sk-...abcd`), so a real key pasted by mistake is not echoed whole."""
    if not key:
        return NO_KEY
    if len(key) <= 12:
        return key
    return f"{key[:3]}...{key[-4:]}"


@dataclass(slots=True)
class Stats:
    requests: Counter[str] = field(default_factory=Counter)  # by endpoint
    keys: Counter[str] = field(default_factory=Counter)  # generation requests by key label
    statuses: Counter[int] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    rate_limited: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # OpenAI's `prompt_cache_key` (chat and Responses): how many carried one; the distinct ones.
    prompt_cache_keyed: int = 0
    prompt_cache_keys: set[str] = field(default_factory=set)

    def cache_key(self, key: str) -> None:
        self.prompt_cache_keyed += 1
        if len(self.prompt_cache_keys) < MAX_CACHE_KEYS:
            self.prompt_cache_keys.add(key)

    def enter(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.in_flight, self.max_in_flight)

    def snapshot(self, *, extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "simulated": True,
            "requests_total": sum(self.requests.values()),
            "requests_by_endpoint": dict(self.requests),
            "requests_by_key": dict(self.keys),
            "responses_by_status": {str(status): count for status, count in self.statuses.items()},
            "rate_limited": self.rate_limited,
            "faults_injected": dict(self.faults),
            "faults_total": sum(self.faults.values()),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "tokens": {
                "prompt": self.prompt_tokens,
                "completion": self.completion_tokens,
                "cached": self.cached_tokens,
            },
            "prompt_cache_keys": {
                "requests": self.prompt_cache_keyed,
                "distinct": len(self.prompt_cache_keys),
            },
            **extra,
        }
