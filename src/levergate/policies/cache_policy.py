"""Whether a request may use the cache, and what its own headers ask for — pure functions.

The rule comes from the config (a feature rule over a model rule over the default); the call
then narrows it with its `CachePolicy` (core/controls.py: skip the lookup and refresh the entry,
do not write, accept only entries younger than N seconds, store this answer for N seconds),
which the edge reads from `Cache-Control` and `x-levergate-cache-ttl` (control_headers.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from levergate.config import CacheRuleSettings, CacheSettings
from levergate.core.controls import CachePolicy


def rule_for(settings: CacheSettings, *, model: str, feature: str) -> CacheRuleSettings:
    if feature and feature in settings.features:
        return settings.features[feature]
    return settings.models.get(model, settings.default)


# Why a request was not looked up, as `x-levergate-cache: bypass; reason=...` says it.
OFF = "off"  # the rule's mode is `off`
CHOICES = "n"  # n > 1 asks for variety (`cache_n: false`)
NONDETERMINISTIC = "nondeterministic"  # sampled: no temperature 0, no seed (mode deterministic)


def bypass_reason(rule: CacheRuleSettings, body: Mapping[str, Any]) -> str | None:
    """None when the request may be served from and written to the cache, else why not."""
    if rule.mode == "off":
        return OFF
    n = body.get("n")
    if isinstance(n, int) and n > 1 and not rule.cache_n:
        return CHOICES
    if rule.mode == "always":
        return None
    temperature = body.get("temperature")
    seed = body.get("seed")
    if temperature == 0 or (isinstance(seed, int) and not isinstance(seed, bool)):
        return None
    return NONDETERMINISTIC


def bypass_header(reason: str) -> str:
    """The `x-levergate-cache` value of a bypass: the outcome, then why (a client that sent no
    temperature learns that it is the reason, and which setting changes it)."""
    return f"bypass; reason={reason}"


def clamped(policy: CachePolicy, *, max_ttl: float) -> CachePolicy:
    """The call's cache policy (`ctx.controls.cache`) with its TTL clamped to `max_ttl`: the TTL
    reaches a store shared by every tenant (an infinite one made a 500 after the upstream was
    paid, 1e20 a Redis refusal). The edge has refused garbage with a 400 already."""
    if policy.ttl is None or policy.ttl <= max_ttl:
        return policy
    return dataclasses.replace(policy, ttl=max_ttl)


def namespace(settings: CacheSettings, tenant: str) -> str:
    return settings.tenant_namespaces.get(tenant, tenant)
