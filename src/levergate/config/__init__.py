"""The settings tree. Every default of the gateway lives in this package, and nowhere else reads
the environment. One module per part of the tree (server, upstreams, local, keys, cache,
traffic); `settings` is the root and its loading.

Sources, highest priority first: values given explicitly (`levergate serve` flags, keyword
arguments of `Settings.load`), then `LEVERGATE_*` environment variables (nested with `__`, e.g.
`LEVERGATE_SERVER__PORT=9000`; see `environment`), then the YAML file (`Settings.load(path)`),
then the defaults in these modules. Secrets are `SecretStr`: they print as `**********`. Every
field is listed in docs/configuration.md, generated from these modules (`reference`).

Resource limits: every client-controlled size, count, number and time, and every upstream
answer, is bounded (the same table is in the README):

    what                          setting (section.field)              default        client gets
    request head                  server.max_header_bytes, max_headers 64 KiB, 100    431
    head arriving                 server.head_timeout_seconds          10 s           408
    body arriving                 server.body_timeout_seconds,         10 s,          408
                                  server.body_min_bytes_per_second     256 B/s
    idle keep-alive               server.keep_alive_timeout_seconds    5 s            closed
    open connections              server.max_connections               4,096 (*)      503
    connections per peer address  server.max_connections_per_peer      1,024 (0 off)  503
    silent connections at the cap server.shed_idle_after_seconds       1 s            closed
    JSON request body             server.max_body_bytes                8 MiB          413
    large JSON bodies, a tenant   server.large_requests.per_tenant,    4, 16, 64      waits; 429
      (from min_bytes: 64 KiB)      in_flight, waiting_per_tenant
    JSON nesting, wherever JSON   MAX_JSON_DEPTH (fixed, below what    128 levels     400 (upstream
      enters                        orjson writes)                                    answer: 502)
    streamed upload (the file's   server.max_upload_bytes (+ 64 KiB    200 MiB        413
      own bytes)                    of multipart framing)
    embedding inputs              limits.max_embedding_inputs          2,048          400
    messages, tools               limits.max_messages, max_tools       2,048, 128     400
    Anthropic content blocks      limits.max_content_blocks            20,000         400
    stop, n, output tokens        limits.max_stop, max_n,              4, 128,        400
                                  limits.max_output_tokens             1,000,000
    x-levergate-timeout           limits.min/max_timeout_seconds       0.01 s, 1 h    400, clamped
    x-levergate-feature, -workflow, MAX_FEATURE_CHARS, MAX_TENANT_CHARS 128 chars      400
      -tenant (auth off)            (fixed: control_headers, principal)
    cache TTL header, max-age     cache.max_ttl_seconds                30 days        400, clamped
    embeddings answer from cache  cache.embeddings_max_response_bytes  128 MiB        413
    embedding copies              cache.embeddings_max_copies          16 per input   400
    one cache entry               cache.store.max_entry_bytes          64 MiB         not stored
    upstream answer               upstreams[].response_limits          64 MiB         502
                                    .body_bytes
    upstream error body           ... .error_body_bytes                1 MiB          rest unread
    upstream stream event         ... .event_bytes                     8 MiB          502 or event
    upstream exchange             upstreams[].timeouts.total           600 s          504
    /metrics series               metrics.max_label_sets               500            "other"
    a key's models                MAX_KEY_MODELS, MAX_MODEL_NAME_CHARS 256, 256 chars 400
    failing batch line / job step batch.max_attempts, max_job_attempts 5, 5           error line /
                                                                                      job failed
    stored responses, a tenant    responses.store.tenant_bytes         64 MiB         own LRU out
    stored responses, in all      responses.store.max_bytes,           1 GiB,         largest
                                  responses.store.memory_bytes         128 MiB        tenant's LRU
    one stored response           responses.max_stored_bytes           16 MiB         not kept
    conversation items, turns     responses.max_conversation_items     4,096          400
    a tenant's batch storage      batch.quotas.stored_bytes            10 GiB         413, 429
    files, batches, async reqs    batch.quotas.files, queued_batches,  1,000, 32,     429
                                  batch.quotas.pending_async_requests  1,000
    a file's life                 batch.file_expiry_seconds,           30 days        swept
                                  upload's expires_after (1 h-30 d)
    batch store call              batch.store.timeout_seconds          10 s           503
    shutdown                      server.graceful_shutdown_seconds     10 s           event or 503
    batch lines in flight/tenant  batch.max_tenant_share x concurrency 0.9 x 128      waits
    batch job steps per tenant    batch.job_workers (a tenant: half)   4 (2)          waits
    webhook deliveries            webhooks.workers, webhooks.queue     8, 1,000       retried later

    (*) at most (soft fd limit - 64) / 2; `levergate serve` raises the soft limit to the hard one.
"""

from __future__ import annotations

from levergate.config.base import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SIM_PORT,
    MAX_JSON_DEPTH,
    SECRET_MIN_CHARS,
    WILDCARD,
)
from levergate.config.batch import BatchSettings, BatchStoreSettings, TenantQuotasSettings
from levergate.config.cache import (
    CacheMode,
    CacheRuleSettings,
    CacheSettings,
    CacheStoreSettings,
    GuardName,
    SemanticCacheSettings,
)
from levergate.config.cascade import CascadeSettings, NamedCascadeSettings
from levergate.config.catalog import (
    CapabilitiesSettings,
    CatalogEntrySettings,
    LedgerSettings,
    PriceSettings,
    TierPriceSettings,
)
from levergate.config.deferral import (
    AsyncRequestsSettings,
    DeferRouteSettings,
    DeferSettings,
    WebhooksSettings,
    WebhookTargetSettings,
)
from levergate.config.keys import (
    AdminSettings,
    ApiKeySettings,
    AuthSettings,
    KeyPolicySettings,
    KeyStoreSettings,
    SpendSettings,
)
from levergate.config.local import (
    BUNDLED_EMBEDDING_FILE,
    BUNDLED_EMBEDDING_PACKAGE,
    BUNDLED_MODEL_FILE,
    BUNDLED_MODEL_PACKAGE,
    KVCacheType,
    LocalEmbeddingsSettings,
    LocalUpstreamSettings,
    PrefixCacheSettings,
    Quantization,
    SpeculationSettings,
    cache_home,
    packaged_file,
)
from levergate.config.microbatch import MicroBatchRuleSettings, MicroBatchSettings
from levergate.config.prompt_cache import (
    BreakpointsSettings,
    PrefixLintSettings,
    PromptCacheSettings,
)
from levergate.config.responses import ResponsesSettings, ResponseStoreSettings
from levergate.config.routing import (
    LearnedSettings,
    RouteSpecSettings,
    RoutingSettings,
    RuleSettings,
    WhenSettings,
)
from levergate.config.server import (
    BackgroundSettings,
    LargeRequestSettings,
    MetricsSettings,
    RequestLimitsSettings,
    ServerSettings,
)
from levergate.config.settings import Settings
from levergate.config.stores import DEFAULT_CONNECTION, ConnectionSettings, Stores
from levergate.config.tiers import (
    ClassDeadlinesSettings,
    TierPriorSettings,
    TierPriorsSettings,
    TierRouteSettings,
    TiersSettings,
)
from levergate.config.traffic import (
    AffinitySettings,
    AimdSettings,
    BalanceSettings,
    EjectionSettings,
    FallbackOn,
    HealthCheckSettings,
    MaxWaitSettings,
    RetrySettings,
    TrafficSettings,
)
from levergate.config.trim import TRIM_MARKER, TrimRuleSettings, TrimSettings
from levergate.config.upstreams import (
    PASSED_RESPONSE_HEADERS,
    AnthropicUpstreamSettings,
    AnyUpstream,
    BalanceStrategy,
    ModelSettings,
    PoolSettings,
    RateLimitsSettings,
    ResponseLimitsSettings,
    TargetSettings,
    TimeoutsSettings,
    UpstreamSettings,
)

__all__ = [
    "BUNDLED_EMBEDDING_FILE",
    "BUNDLED_EMBEDDING_PACKAGE",
    "BUNDLED_MODEL_FILE",
    "BUNDLED_MODEL_PACKAGE",
    "DEFAULT_CONNECTION",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SIM_PORT",
    "MAX_JSON_DEPTH",
    "PASSED_RESPONSE_HEADERS",
    "SECRET_MIN_CHARS",
    "TRIM_MARKER",
    "WILDCARD",
    "AdminSettings",
    "AffinitySettings",
    "AimdSettings",
    "AnthropicUpstreamSettings",
    "AnyUpstream",
    "ApiKeySettings",
    "AsyncRequestsSettings",
    "AuthSettings",
    "BackgroundSettings",
    "BalanceSettings",
    "BalanceStrategy",
    "BatchSettings",
    "BatchStoreSettings",
    "BreakpointsSettings",
    "CacheMode",
    "CacheRuleSettings",
    "CacheSettings",
    "CacheStoreSettings",
    "CapabilitiesSettings",
    "CascadeSettings",
    "CatalogEntrySettings",
    "ClassDeadlinesSettings",
    "ConnectionSettings",
    "DeferRouteSettings",
    "DeferSettings",
    "EjectionSettings",
    "FallbackOn",
    "GuardName",
    "HealthCheckSettings",
    "KVCacheType",
    "KeyPolicySettings",
    "KeyStoreSettings",
    "LargeRequestSettings",
    "LearnedSettings",
    "LedgerSettings",
    "LocalEmbeddingsSettings",
    "LocalUpstreamSettings",
    "MaxWaitSettings",
    "MetricsSettings",
    "MicroBatchRuleSettings",
    "MicroBatchSettings",
    "ModelSettings",
    "NamedCascadeSettings",
    "PoolSettings",
    "PrefixCacheSettings",
    "PrefixLintSettings",
    "PriceSettings",
    "PromptCacheSettings",
    "Quantization",
    "RateLimitsSettings",
    "RequestLimitsSettings",
    "ResponseLimitsSettings",
    "ResponseStoreSettings",
    "ResponsesSettings",
    "RetrySettings",
    "RouteSpecSettings",
    "RoutingSettings",
    "RuleSettings",
    "SemanticCacheSettings",
    "ServerSettings",
    "Settings",
    "SpeculationSettings",
    "SpendSettings",
    "Stores",
    "TargetSettings",
    "TenantQuotasSettings",
    "TierPriceSettings",
    "TierPriorSettings",
    "TierPriorsSettings",
    "TierRouteSettings",
    "TiersSettings",
    "TimeoutsSettings",
    "TrafficSettings",
    "TrimRuleSettings",
    "TrimSettings",
    "UpstreamSettings",
    "WebhookTargetSettings",
    "WebhooksSettings",
    "WhenSettings",
    "cache_home",
    "packaged_file",
]
