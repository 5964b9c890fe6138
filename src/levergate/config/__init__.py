"""The settings tree. Every default of the gateway lives in this package, and nowhere else reads
the environment. One module per part of the tree (server, upstreams, local, keys, cache,
traffic); `settings` is the root and its loading.

Sources, highest priority first: `LEVERGATE_*` environment variables (nested with `__`, e.g.
`LEVERGATE_SERVER__PORT=9000`), then values given in code or read from the YAML file
(`Settings.load(path)`), then the defaults in these modules. Secrets are `SecretStr`: they print as
`**********`.
"""

from __future__ import annotations

from levergate.config.base import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_SIM_PORT,
    SECRET_MIN_CHARS,
    WILDCARD,
)
from levergate.config.cache import (
    Cache,
    CacheMode,
    CacheRule,
    CacheStore,
    GuardName,
    SemanticCacheSettings,
)
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
from levergate.config.server import Background, Metrics, RequestLimits, Server
from levergate.config.settings import Settings
from levergate.config.traffic import (
    AimdSettings,
    BalanceSettings,
    EjectionSettings,
    FallbackOn,
    HealthCheckSettings,
    MaxWait,
    RetrySettings,
    Traffic,
)
from levergate.config.upstreams import (
    PASSED_RESPONSE_HEADERS,
    AnyUpstream,
    Model,
    Pool,
    Price,
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
    "WILDCARD",
    "Admin",
    "AimdSettings",
    "AnyUpstream",
    "ApiKey",
    "Auth",
    "Background",
    "BalanceSettings",
    "Cache",
    "CacheMode",
    "CacheRule",
    "CacheStore",
    "EjectionSettings",
    "FallbackOn",
    "GuardName",
    "HealthCheckSettings",
    "KeyPolicy",
    "KeyStoreSettings",
    "LocalEmbeddings",
    "LocalUpstream",
    "MaxWait",
    "Metrics",
    "Model",
    "Pool",
    "PrefixCacheSettings",
    "Price",
    "Quantization",
    "RateLimits",
    "RequestLimits",
    "ResponseLimits",
    "RetrySettings",
    "SemanticCacheSettings",
    "Server",
    "Settings",
    "Speculation",
    "SpendSettings",
    "Target",
    "Timeouts",
    "Traffic",
    "Upstream",
    "cache_home",
    "packaged_file",
]
