"""Whether a request may use the cache, and what its own headers ask for — pure functions.

The rule comes from the config (a feature rule over a model rule over the default); the request
then narrows it with `Cache-Control` (`no-cache`: skip the lookup and refresh the entry;
`no-store`: do not write; `max-age=N`: accept only entries younger than N seconds) and
`x-levergate-cache-ttl: N` (store this answer for N seconds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levergate.config import Cache, CacheRule
from levergate.errors import BadRequest

TTL_HEADER = "x-levergate-cache-ttl"


@dataclass(frozen=True, slots=True)
class Controls:
    lookup: bool = True
    store: bool = True
    max_age: float | None = None
    ttl: float | None = None


DEFAULT_CONTROLS = Controls()


def rule_for(settings: Cache, *, model: str, feature: str) -> CacheRule:
    if feature and feature in settings.features:
        return settings.features[feature]
    return settings.models.get(model, settings.default)


def bypass_reason(rule: CacheRule, body: Mapping[str, Any]) -> str | None:
    """None when the request may be served from and written to the cache, else why not."""
    if rule.mode == "off":
        return "off"
    n = body.get("n")
    if isinstance(n, int) and n > 1 and not rule.cache_n:
        return "n"
    if rule.mode == "always":
        return None
    temperature = body.get("temperature")
    seed = body.get("seed")
    if temperature == 0 or (isinstance(seed, int) and not isinstance(seed, bool)):
        return None
    return "sampled"


def controls(headers: Mapping[str, str], *, max_ttl: float) -> Controls:
    """Read the request's cache directives. Unknown directives are ignored, as HTTP caches do;
    a number that is not one (garbage, nan, inf, negative) is a 400 before any work is done,
    and a TTL above `max_ttl` is clamped to it: these values reach a store shared by every
    tenant (an infinite TTL made a 500 after the upstream was paid, 1e20 a Redis refusal)."""
    if "cache-control" not in headers and TTL_HEADER not in headers:
        return DEFAULT_CONTROLS
    lookup = store = True
    max_age: float | None = None
    for part in headers.get("cache-control", "").split(","):
        name, _, value = part.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            lookup = False
        elif name == "no-store":
            store = False
        elif name == "max-age":
            max_age = _seconds(value, "Cache-Control max-age")
    ttl = None
    if TTL_HEADER in headers:
        ttl = min(_seconds(headers[TTL_HEADER], TTL_HEADER), max_ttl)
    return Controls(lookup=lookup, store=store, max_age=max_age, ttl=ttl or None)


def _seconds(text: str, name: str) -> float:
    try:
        value = float(text.strip().strip('"'))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise BadRequest(
            f"'{name}' must be a finite, non-negative number of seconds.",
            code="invalid_header_value",
        )
    return value


def namespace(settings: Cache, tenant: str) -> str:
    return settings.tenant_namespaces.get(tenant, tenant)
