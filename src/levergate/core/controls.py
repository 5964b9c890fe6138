"""What a caller asks of one call (`Controls`) and who the caller is (`Principal`): typed values
on the call's `Context`, decided once at the edge.

A proxy request states its controls in `x-levergate-*` headers (and `Cache-Control`), which
`levergate.control_headers.parse_controls` turns into a `Controls` before the call is made — a
bad value is a 400 naming the header there, before any work. A library call passes them as
arguments (`gw.chat(..., priority="interactive", timeout=5, cache=False)`) or as a whole
`controls=Controls(...)`. Layers read `call.ctx.controls` and `call.ctx.principal` and never a
raw header: the headers a context still carries are for pass-through only.

The principal is decided by one rule, `levergate.principal.identify`, that the Authenticate
layer, the route guards and the handlers all use.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

DEFAULT_TENANT = "default"


class Priority(enum.IntEnum):
    """Lower value is served first."""

    INTERACTIVE = 0
    DEFAULT = 1
    BATCH = 2


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """How this call may use the caches, narrowing the configured rule (policies/cache_policy):
    `lookup=False` skips the lookup and refreshes the entry (`Cache-Control: no-cache`),
    `store=False` writes nothing (`no-store`), `max_age` accepts only entries younger than that
    many seconds, `ttl` keeps this answer that long (clamped to `cache.max_ttl_seconds`)."""

    lookup: bool = True
    store: bool = True
    max_age: float | None = None
    ttl: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("max_age", self.max_age), ("ttl", self.ttl)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"CachePolicy.{name} must be a finite number of seconds >= 0")


DEFAULT_CACHE = CachePolicy()
# `cache=False` in the library: neither read nor write the caches.
NO_CACHE = CachePolicy(lookup=False, store=False)


@dataclass(frozen=True, slots=True)
class AsyncAsk:
    """The async-request controls (batch/async_requests.py acts on them): run the request as
    an async job (`x-levergate-async`), defer it to a provider's batch API (`x-levergate-defer:
    24h`), or by an `x-levergate-deadline` (Unix seconds) far enough away, and the configured
    webhook target to tell when it is done."""

    asked: bool = False  # x-levergate-async: true
    defer: bool = False  # x-levergate-defer: 24h
    not_after: int | None = None  # x-levergate-deadline, Unix seconds
    webhook: str | None = None  # a name from `webhooks.targets`


@dataclass(frozen=True, slots=True)
class Controls:
    """The per-call knobs. Every field has the value of a call that asked for nothing."""

    priority: Priority = Priority.DEFAULT
    # Absolute seconds on the gateway's clock (`x-levergate-timeout` or `timeout=` from now),
    # enforced by Deadline and bounding every wait above it; None: no deadline of its own.
    deadline: float | None = None
    feature: str = ""  # the feature tag (routing rules, cache rules, metrics labels)
    cache: CachePolicy = DEFAULT_CACHE
    # Prompt-lookup speculative decoding on the local engine: None leaves it to the config.
    speculative: bool | None = None
    # The workflow this call is a step of (`x-levergate-workflow`), for the request record.
    workflow: str | None = None
    # A W3C `traceparent` the call's span continues when the request sent none: a workflow
    # step's, so a traced workflow's calls hang under its steps (levergate/workflow.py).
    trace: str | None = None
    # The async-request controls; None when the request sent none (the hot path's one test).
    run_async: AsyncAsk | None = None
    # When the client itself stops waiting, on the gateway's clock: the OpenAI and Anthropic
    # SDKs send their timeout as `x-stainless-read-timeout`. Never enforced (that is
    # `deadline`'s); the tier policy may plan for it (`tiers.client_timeout`).
    patience: float | None = None


DEFAULT_CONTROLS = Controls()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who the call is for: the tenant (what caches, limits and the ledger are keyed by) and the
    gateway key's id when one was presented (never the key)."""

    tenant: str = DEFAULT_TENANT
    key_id: str | None = None


ANONYMOUS = Principal()
