"""The caches: exact entries and their store, policy per model or feature, the semantic cache."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict
from levergate.config.local import cache_home
from levergate.config.shadow import ShadowSettings
from levergate.config.stores import MEMCACHED_ADDRESS, ConnectionName

CacheMode = Literal["off", "deterministic", "always"]


class CacheRuleSettings(_Strict):
    """When answers may be cached: `cache.default`, or per model alias, route or named cascade
    (`cache.models`, keyed by the name the client sends) or per feature tag (`cache.features`).

    `deterministic` (the default) caches only requests that ask for one answer: temperature 0
    or a fixed seed. `always` also caches sampled answers; `off` never reads nor writes. A
    bypassed request says why: `x-levergate-cache: bypass; reason=nondeterministic` (or `n`,
    `off`).

    Why `deterministic` is the default although OpenAI's default temperature is 1, so most SDK
    calls (which set none) bypass: a request at temperature > 0 without a seed asks for a
    *sample*. Serving every later identical request the first stored sample silently turns that
    into a fixed answer — a "regenerate" button, best-of-k by repeated calls, evaluation runs
    and synthetic data that rely on variety would all get the same text back, for free, with no
    sign of it. That changes what the client asked for, so it is the operator's decision, per
    alias, route or feature, where the traffic is one question wanting one answer (FAQ,
    classification, extraction): `cache: {models: {auto: {mode: always}}}`."""

    mode: CacheMode = "deterministic"
    ttl_seconds: float = Field(24 * 3600.0, gt=0)
    # An answer that calls tools is usually about live state; cache it only when told to.
    cache_tool_calls: bool = False
    # Requests for several choices (n > 1) ask for variety; cache them only when told to.
    cache_n: bool = False
    # Opt in to the semantic cache for this model / feature (never on by default).
    semantic: bool = False


class CacheStoreSettings(_Strict):
    """Where exact entries live. `sqlite` survives restarts; `redis` and `memcached` are shared
    by replicas (Memcached may evict anything at any time and restarts empty: a pure cache);
    `memory` is per gateway instance. The default (`auto` with no `stores` connection) is
    `memory`, so that gateways built in one process (tests, library users) never see each
    other's entries and nothing writes a file unasked; `levergate serve` with no upstream (the
    embedded default, `make run`) uses `sqlite` at `$XDG_CACHE_HOME/levergate/cache.sqlite3`
    unless a backend or a connection is set. A bounded in-memory LRU sits in front of the
    shared and file stores when `front_bytes` > 0."""

    # `auto`: what the section's connection offers (redis, then memcached, then sqlite), else
    # `memory`.
    backend: Literal["auto", "memory", "sqlite", "redis", "memcached"] = "auto"
    # The `stores` connection the entries live in (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    memory_bytes: int = Field(256 * 1024 * 1024, ge=0)
    front_bytes: int = Field(64 * 1024 * 1024, ge=0)
    # How long an entry may stay in the front LRU before the back store is asked again.
    front_ttl_seconds: float = Field(60.0, gt=0)
    # Under the user's cache folder, never the working directory (nor a checkout).
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "cache.sqlite3"))
    # Deprecated: set `stores.<connection>.redis_url` (kept for one release).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:cache:"
    # `host:port` (`[::1]:11211` for IPv6) of one Memcached server. Deprecated: set
    # `stores.<connection>.memcached_address` (kept for one release).
    memcached_address: str = Field("127.0.0.1:11211", pattern=MEMCACHED_ADDRESS)
    # Keys are `<prefix><40 hex digits>[chunk suffix]`: printable ASCII with no spaces, within
    # Memcached's 250 bytes.
    memcached_prefix: str = Field("levergate:cache:", pattern=r"^[!-~]{0,180}$")
    # The server's item size limit (memcached -I, 1 MiB by default): larger values are split
    # into items this big (stores/kv_memcached.py).
    memcached_item_bytes: int = Field(1024 * 1024, ge=4096, le=1024 * 1024 * 1024)
    # Connections, and the threads that drive them (pymemcache is a blocking client).
    memcached_connections: int = Field(8, ge=1, le=256)
    # A store slower than this is treated as down for the request (a miss, never a failure).
    timeout_seconds: float = Field(0.1, gt=0)
    # After a store failure, skip the store for this long instead of waiting on it again; then
    # one request tries it while the others still skip it (stores/circuit.py).
    cooldown_seconds: float = Field(1.0, ge=0)
    # A larger entry is not written to sqlite, redis or memcached (Redis refuses values over
    # 512 MB and drops the connection); counted as a `refused` fault, with no cool-down.
    max_entry_bytes: int = Field(64 * 1024 * 1024, ge=1024)


class SemanticCalibrationSettings(ShadowSettings):
    """Verifications of sampled semantic lookups, off the request path (layers/cache/checks.py):
    the labels `levergate cache threshold` chooses a route's threshold from.

    With probability `rate` (and at most `per_minute` a minute, per gateway) a lookup is
    sampled, whatever it finds. A hit is served as always, and its answer is compared with what
    the model asked answers to the same request (one call, off the path, paid for as
    `kind="shadow"`). A miss whose neighbours reach `band` below the threshold is served
    normally, and the first of them the guards let through (the hit a lower threshold would have
    served) is compared with the answer the request got: no model call, unless `compare: judge`.
    Every sampled lookup is a label in the request log (layer `semantic`, its similarity and
    verdict), so the hit rate and the false-hit rate can be read at thresholds down to the
    band's floor. Off by default (`rate: 0`); the queue, its workers and their deadline bound
    what is in flight (a full queue drops the check, counted)."""

    band: float = Field(0.1, ge=0, le=1)
    per_minute: float = Field(60.0, gt=0, le=1_000_000)
    queue: int = Field(64, ge=1, le=100_000)
    concurrency: int = Field(1, ge=1, le=64)
    timeout_seconds: float = Field(60.0, gt=0, le=3600)


GuardName = Literal["negation", "numbers", "dates", "entities", "key_terms", "swapped", "order"]


class SemanticCacheSettings(_Strict):
    """Nearest-neighbour lookup of the final user text. Threshold and guards were chosen on the
    labelled paraphrase data (benchmarks/results/cache_semantic_eval.md): 0.95 with every guard
    is the lowest threshold whose false hits stay <= 1% of qqp_dev's non-duplicate pairs
    (0.74%, precision 91.8%, recall 14.2% on all 40,370 pairs); without guards 1% needs 0.97
    (recall 12.5%). On the four sets it was not chosen on (mrpc, stsb, semeval, sick) the same
    setting gives 0-0.37% false hits at 2.0-15.7% recall. Dropping `swapped` would lift qqp_dev
    recall to 16.0% at 0.85% false hits; it stays, because a swapped direction ("USD to EUR" /
    "EUR to USD") is exactly the wrong answer that paraphrase sets rarely contain.
    Above `hnsw_above` entries a partition is searched with HNSW (exact numpy search costs
    3-10 ms at 100k entries on the project's machines, HNSW 0.2-0.7 ms).

    The index is in-process (`index: local`): a replica finds only the answers it stored itself.
    With `index: redis` every replica's index follows a Redis Stream of adds and removes
    (`<prefix>semantic:log`, replayed at start, then tailed; stores/vector_redis.py), so an
    answer stored through one replica is found through all; search stays in-process and plain
    Redis will do (no vector module). The log is trimmed to about `max_entries` operations
    (~1.9 KB each at 384 dimensions). It needs entries the replicas share: a `memory` cache
    store is refused when the gateway is built. Redis failing only stops the sharing (logged,
    counted), never a request."""

    threshold: float = Field(0.95, gt=0, le=1)
    # The guards that may refuse a near neighbour (levergate.policies.guards); [] turns them off.
    guards: tuple[GuardName, ...] = (
        "negation", "numbers", "dates", "entities", "key_terms", "swapped", "order",
    )  # fmt: skip
    top_k: int = Field(4, ge=1)
    embedder: Literal["local", "upstream"] = "local"
    # For `embedder: upstream`: the model alias sent to this gateway's own /v1/embeddings route.
    embedding_model: str = ""
    max_entries: int = Field(100_000, ge=1)
    # Above this many entries in one partition the exact numpy index becomes an HNSW graph.
    hnsw_above: int = Field(20_000, ge=1)
    # Optional: ask this model whether the cached answer answers the new question.
    verify_model: str | None = None
    # `auto`: `redis` when the cache store is Redis through a `stores` connection, else `local`.
    index: Literal["auto", "local", "redis"] = "auto"
    # For `index: redis`; None takes the cache store's Redis and `redis_prefix`. Deprecated:
    # the index follows the cache store's connection (kept for one release).
    index_redis_url: str | None = None
    index_redis_prefix: str | None = None
    # Sampled lookups verified off the request path, for `levergate cache threshold`.
    calibration: SemanticCalibrationSettings = Field(default_factory=SemanticCalibrationSettings)
    # Thresholds per model or route name, installed by `levergate cache threshold` (and
    # `cache rollback`); a name not in it uses `threshold`. Checked for a change every
    # `watch_seconds` and used from the next lookup (layers/cache/thresholds.py); a file that
    # does not load is refused with a logged error and the thresholds stay. None: none.
    thresholds_file: str | None = None
    watch_seconds: float = Field(2.0, ge=0, le=3600)


class CacheSettings(_Strict):
    """The exact cache, in-flight coalescing, the embeddings cache and the semantic cache."""

    enabled: bool = True
    store: CacheStoreSettings = Field(default_factory=CacheStoreSettings)
    default: CacheRuleSettings = Field(default_factory=CacheRuleSettings)
    # Overrides by model alias, and by feature tag (a feature rule wins over a model rule).
    models: dict[str, CacheRuleSettings] = Field(default_factory=dict)
    features: dict[str, CacheRuleSettings] = Field(default_factory=dict)
    # Tenants never share entries; map several tenants to one namespace to let them.
    tenant_namespaces: dict[str, str] = Field(default_factory=dict)
    coalesce: bool = True
    embeddings: bool = True
    embeddings_ttl_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    # `x-levergate-cache-ttl` above this is clamped to it (garbage, nan, inf or < 0 is a 400):
    # `1e20` made Redis refuse the write, `inf` made a 500 after the upstream was paid.
    max_ttl_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    # The bytes of vectors one embeddings response may carry when the cache assembles it; a
    # 413 beyond. 2,048 inputs of 3,072 dimensions (OpenAI's largest) at ~20 bytes a float fit.
    embeddings_max_response_bytes: int = Field(128 * 1024 * 1024, ge=1024)
    # Inputs an embeddings request may hold per distinct input (400 `too_many_copies` beyond).
    # The cache embeds each distinct input once and answers every copy with a full vector, so
    # copies cost the upstream nothing and the gateway everything: 2,048 x "a" (10 KB in, one
    # input upstream) made a 66.7 MB answer and let four slow clients stall everyone else
    # (issue 20). 16 still takes a column of 2,048 rows holding 128 distinct values.
    embeddings_max_copies: int = Field(16, ge=1)
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)
