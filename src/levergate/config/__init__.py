"""The settings tree. Every default of the gateway lives in this package, and nowhere else reads
the environment. One module per part of the tree (server, upstreams, local, keys, cache,
traffic); `settings` is the root and its loading.

Sources, highest priority first: `LEVERGATE_*` environment variables (nested with `__`, e.g.
`LEVERGATE_SERVER__PORT=9000`), then values given in code or read from the YAML file
(`Settings.load(path)`), then the defaults in these modules. Secrets are `SecretStr`: they print as
`**********`.

Resource limits: every client-controlled size, count, number and time, and every upstream
answer, is bounded (the same table is in the README):

    what                          setting (section.field)              default        client gets
    request head                  server.max_header_bytes, max_headers 64 KiB, 100    431
    head arriving                 server.head_timeout_seconds          10 s           408
    body arriving                 server.body_timeout_seconds,         10 s,          408
                                  server.body_min_bytes_per_second     256 B/s
    idle keep-alive               server.keep_alive_timeout_seconds    5 s            closed
    open connections              server.max_connections               4,096 (*)      503
    JSON request body             server.max_body_bytes                8 MiB          413
    streamed upload               server.max_upload_bytes              200 MiB        413
    embedding inputs              limits.max_embedding_inputs          2,048          400
    messages, tools               limits.max_messages, max_tools       2,048, 128     400
    Anthropic content blocks      limits.max_content_blocks            20,000         400
    stop, n, output tokens        limits.max_stop, max_n,              4, 128,        400
                                  limits.max_output_tokens             1,000,000
    x-levergate-timeout           limits.min/max_timeout_seconds       0.01 s, 1 h    400, clamped
    cache TTL header, max-age     cache.max_ttl_seconds                30 days        400, clamped
    embeddings answer from cache  cache.embeddings_max_response_bytes  128 MiB        413
    one cache entry               cache.store.max_entry_bytes          64 MiB         not stored
    upstream answer               upstreams[].response_limits          64 MiB         502
                                    .body_bytes
    upstream error body           ... .error_body_bytes                1 MiB          rest unread
    upstream stream event         ... .event_bytes                     8 MiB          502 or event
    upstream exchange             upstreams[].timeouts.total           600 s          504
    /metrics series               metrics.max_label_sets               500            "other"
    shutdown                      server.graceful_shutdown_seconds     10 s           event or 503

    (*) at most (soft fd limit - 64) / 2; `levergate serve` raises the soft limit to the hard one.
"""

from __future__ import annotations

from levergate.config.base import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SIM_PORT,
    SECRET_MIN_CHARS,
    WILDCARD,
)
from levergate.config.batch import Batch, BatchStore
from levergate.config.cache import (
    Cache,
    CacheMode,
    CacheRule,
    CacheStore,
    GuardName,
    SemanticCacheSettings,
)
from levergate.config.cascade import CascadeSettings, NamedCascade
from levergate.config.catalog import Capabilities, CatalogEntry, Ledger, Price
from levergate.config.deferral import AsyncRequests, Defer, DeferRoute, Webhooks, WebhookTarget
from levergate.config.keys import Admin, ApiKey, Auth, KeyPolicy, KeyStoreSettings, SpendSettings
from levergate.config.local import (
    BUNDLED_EMBEDDING_FILE,
    BUNDLED_EMBEDDING_PACKAGE,
    BUNDLED_MODEL_FILE,
    BUNDLED_MODEL_PACKAGE,
    LocalEmbeddings,
    LocalUpstream,
    PrefixCacheSettings,
    Quantization,
    Speculation,
    cache_home,
    packaged_file,
)
from levergate.config.microbatch import MicroBatchRule, MicroBatchSettings
from levergate.config.prompt_cache import Breakpoints, PrefixLint, PromptCache
from levergate.config.responses import ResponsesSettings, ResponseStoreSettings
from levergate.config.routing import Learned, RouteSpec, Routing, Rule, When
from levergate.config.server import Background, Metrics, RequestLimits, Server
from levergate.config.settings import Settings
from levergate.config.traffic import (
    AffinitySettings,
    AimdSettings,
    BalanceSettings,
    EjectionSettings,
    FallbackOn,
    HealthCheckSettings,
    MaxWait,
    RetrySettings,
    Traffic,
)
from levergate.config.trim import TRIM_MARKER, Trim, TrimRule
from levergate.config.upstreams import (
    PASSED_RESPONSE_HEADERS,
    AnthropicUpstream,
    AnyUpstream,
    BalanceStrategy,
    Model,
    Pool,
    RateLimits,
    ResponseLimits,
    Target,
    Timeouts,
    Upstream,
)

__all__ = [
    "BUNDLED_EMBEDDING_FILE",
    "BUNDLED_EMBEDDING_PACKAGE",
    "BUNDLED_MODEL_FILE",
    "BUNDLED_MODEL_PACKAGE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SIM_PORT",
    "PASSED_RESPONSE_HEADERS",
    "SECRET_MIN_CHARS",
    "TRIM_MARKER",
    "WILDCARD",
    "Admin",
    "AffinitySettings",
    "AimdSettings",
    "AnthropicUpstream",
    "AnyUpstream",
    "ApiKey",
    "AsyncRequests",
    "Auth",
    "Background",
    "BalanceSettings",
    "BalanceStrategy",
    "Batch",
    "BatchStore",
    "Breakpoints",
    "Cache",
    "CacheMode",
    "CacheRule",
    "CacheStore",
    "Capabilities",
    "CascadeSettings",
    "CatalogEntry",
    "Defer",
    "DeferRoute",
    "EjectionSettings",
    "FallbackOn",
    "GuardName",
    "HealthCheckSettings",
    "KeyPolicy",
    "KeyStoreSettings",
    "Learned",
    "Ledger",
    "LocalEmbeddings",
    "LocalUpstream",
    "MaxWait",
    "Metrics",
    "MicroBatchRule",
    "MicroBatchSettings",
    "Model",
    "NamedCascade",
    "Pool",
    "PrefixCacheSettings",
    "PrefixLint",
    "Price",
    "PromptCache",
    "Quantization",
    "RateLimits",
    "RequestLimits",
    "ResponseLimits",
    "ResponseStoreSettings",
    "ResponsesSettings",
    "RetrySettings",
    "RouteSpec",
    "Routing",
    "Rule",
    "SemanticCacheSettings",
    "Server",
    "Settings",
    "Speculation",
    "SpendSettings",
    "Target",
    "Timeouts",
    "Traffic",
    "Trim",
    "TrimRule",
    "Upstream",
    "WebhookTarget",
    "Webhooks",
    "When",
    "cache_home",
    "packaged_file",
]
