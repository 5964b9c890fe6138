"""Traffic control: limits, waiting, retries, fallbacks, balancing, ejection, health checks."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict
from levergate.config.local import cache_home
from levergate.config.stores import ConnectionName
from levergate.config.upstreams import BalanceStrategy, RateLimitsSettings


class MaxWaitSettings(_Strict):
    """Seconds a request of each priority class may wait for capacity when it brings no deadline
    (`x-levergate-timeout`) of its own. Beyond it the request is shed with a Retry-After.
    Waiting is in priority order within one process only (see `TrafficSettings`)."""

    interactive: float = Field(10.0, gt=0)
    default: float = Field(30.0, gt=0)
    batch: float = Field(300.0, gt=0)


class RetrySettings(_Strict):
    """Full-jitter exponential backoff floored by Retry-After, under a gateway-wide budget."""

    enabled: bool = True
    base_seconds: float = Field(0.25, gt=0)
    cap_seconds: float = Field(8.0, gt=0)
    # A hard stop per request, whatever the budget holds.
    max_attempts: int = Field(4, ge=1)
    # Retries may be at most this share of the requests of the last `budget_ttl_seconds`,
    # plus `budget_min_per_second` (Envoy and tower use 20% with a small floor).
    budget_ratio: float = Field(0.2, ge=0)
    budget_min_per_second: float = Field(1.0, ge=0)
    budget_ttl_seconds: float = Field(10.0, gt=0)
    # A provider asking to wait longer than this is not waited for: the error goes back (or to
    # a fallback) at once.
    max_floor_seconds: float = Field(30.0, ge=0)


class AffinitySettings(_Strict):
    """Prefix affinity (`strategy: affinity`; policies/affinity.py). Defaults measured on the
    Mooncake conversation trace (benchmarks/affinity.py, results in benchmarks/results/)."""

    # About 512 tokens of English: the block size vLLM / SGLang / Mooncake hash prefixes by.
    block_bytes: int = Field(2048, ge=64, le=1024 * 1024)
    # Blocks of a prompt looked at (the rest shares its fate): bounds the work per request.
    max_blocks: int = Field(256, ge=1, le=65536)
    # How long a member is believed to hold a prefix it served: providers keep one 5-10
    # minutes idle; a self-hosted replica as long as its cache has room.
    ttl_seconds: float = Field(600.0, gt=0)
    capacity: int = Field(200_000, ge=1, le=10_000_000)  # prefix digests remembered per alias
    # No member takes more than this multiple of the mean requests in flight (plus one).
    load_factor: float = Field(1.25, ge=1.0, le=100.0)
    # What a prompt byte not cached on a member weighs against a byte of prefill already
    # waiting there. Above 1 because a miss is paid again: the conversation's later turns
    # follow it to the new member. Chosen on the Mooncake trace at 1.5x time: 1 keeps 84% of the
    # ceiling's cache hits, 4 keeps 92% (TTFT p50 2.3x better than round robin), 16 93%.
    # Replayed at 1x and 1.25x and with a quarter of the cache, 4 stays within 3% of 16's TTFT
    # p50 and 1-11% ahead of 1's (benchmarks/results/affinity.md).
    miss_weight: float = Field(4.0, ge=0.0, le=1000.0)


class BalanceSettings(_Strict):
    # The default for every model alias; a model's own `balance` overrides it.
    strategy: BalanceStrategy = "p2c"
    # Memory of the TTFT and tokens-per-second averages (time-decayed).
    ewma_seconds: float = Field(10.0, gt=0)
    affinity: AffinitySettings = Field(default_factory=AffinitySettings)


class EjectionSettings(_Strict):
    """Passive outlier ejection (Envoy's defaults where they fit a handful of endpoints)."""

    enabled: bool = True
    consecutive_failures: int = Field(5, ge=1)
    base_seconds: float = Field(30.0, gt=0)
    max_seconds: float = Field(300.0, gt=0)
    # At most this share of the endpoints ejected at once, and never the last one. Envoy's
    # 10% means "one" for the two to four endpoints a model alias usually has.
    max_ejected_share: float = Field(0.5, gt=0, le=1)
    # Eject an endpoint whose latency average (upstream seconds to the reply: the whole answer,
    # or a stream's response head) exceeds this multiple of the median of its serving peers'
    # in the same model alias (None: off).
    latency_factor: float | None = Field(None, gt=1)
    # ...judged only on recent evidence: this many requests within about `balance.ewma_seconds`
    # on the endpoint and on each peer counted, so one long generation or a slowdown of all
    # endpoints, seen first on one of them after a quiet spell, ejects nothing.
    latency_min_requests: int = Field(5, ge=1)


class HealthCheckSettings(_Strict):
    """Active health checks (see layers/traffic/health_checks.py): every endpoint key is probed with
    `GET {base_url}{path}` under its own API key, independent of client traffic. They feed the
    passive ejection state: `unhealthy_threshold` failed probes in a row eject the endpoint and
    keep it out while probes fail; `healthy_threshold` passes in a row readmit it at once."""

    enabled: bool = False
    path: str = Field("/models", pattern=r"^/")
    interval_seconds: float = Field(5.0, gt=0)
    # A probe not answered within this is a failure (a hung server, not only a dead one).
    timeout_seconds: float = Field(2.0, gt=0)
    unhealthy_threshold: int = Field(2, ge=1)
    healthy_threshold: int = Field(2, ge=1)
    # Each interval is stretched by a random share up to this, so replicas do not probe in step.
    jitter: float = Field(0.1, ge=0, le=1)


class AimdSettings(_Strict):
    initial: float = Field(20.0, ge=1)
    minimum: float = Field(1.0, ge=1)
    maximum: float = Field(1000.0, ge=1)
    increase: float = Field(1.0, gt=0)
    decrease: float = Field(0.9, gt=0, lt=1)
    # A response slower than this counts as a drop too (None: only 429s and timeouts).
    slow_seconds: float | None = Field(None, gt=0)


FallbackOn = Literal["rate_limited", "overloaded", "unavailable", "timeout"]


class TrafficSettings(_Strict):
    """Limits, scheduling, retries, fallbacks and balancing (see layers/traffic/).

    What replicas share: with limits in Redis (`stores.default.redis_url`, or `store: redis`),
    the rpm and tpm of every key, endpoint and tenant. Everything else is per process:
    concurrency caps, the priority queues (each replica orders its own waiters; between
    replicas the shared limiter serves whichever asks first, so a batch flood on one replica
    can take capacity an interactive request on another is waiting for), the retry budget,
    ejection and health-check state, and the balancer's statistics."""

    # Where rate-limit state lives: per process, in Redis shared by every replica, or in a
    # SQLite file shared by the processes of one machine. `auto`: `redis` when the section's
    # `stores` connection has a Redis, else `sqlite` with `server.workers` above 1 (or a
    # connection's `sqlite_dir`), else `memory`.
    store: Literal["auto", "memory", "redis", "sqlite"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    # Deprecated: set `stores.<connection>.redis_url` (kept for one release).
    redis_url: str = "redis://127.0.0.1:6379/0"
    # The hash tag keeps every limit key in one Redis Cluster slot (multi-key Lua scripts).
    redis_prefix: str = "levergate:{limits}:"
    # For `sqlite`: every gateway process on this machine using this file shares its limits,
    # as replicas on one Redis do (stores/limits_sqlite.py).
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "limits.sqlite3"))
    # For `sqlite`: the longest a check waits on the file's lock (on the event loop). Each
    # check holds it for tens of microseconds, but a worker preempted while holding it holds
    # it for the preemption: on a loaded machine that is tens of milliseconds, and a wait cut
    # shorter falls back to per-process limits (as for a Redis outage), which lets N workers
    # send N times the limit for `redis_retry_seconds`.
    sqlite_busy_seconds: float = Field(0.25, gt=0, le=5)
    # A limit check slower than this counts as Redis being down. Generous, because a busy
    # event loop makes a healthy Redis look slow (measured: 250 ms timed out at load 8 on 2
    # cores), and a false outage costs more than a slow check.
    redis_timeout_seconds: float = Field(1.0, gt=0)
    # While Redis is down each process enforces this share of every limit on its own (set it to
    # 1/replicas to stay under the shared limit). After `retry_seconds` one check tries Redis
    # while the others stay local (stores/circuit.py): a hung Redis stalls no one else.
    local_share: float = Field(1.0, gt=0, le=1)
    redis_retry_seconds: float = Field(1.0, gt=0)
    tenants: dict[str, RateLimitsSettings] = Field(default_factory=dict)
    # Limits of every tenant not listed in `tenants` (each gets its own).
    tenant_default: RateLimitsSettings | None = None
    max_wait: MaxWaitSettings = Field(default_factory=MaxWaitSettings)
    # Requests waiting for one limit (in this process) beyond which the lowest priority ones
    # are shed.
    max_queue: int = Field(10_000, ge=1)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    balance: BalanceSettings = Field(default_factory=BalanceSettings)
    ejection: EjectionSettings = Field(default_factory=EjectionSettings)
    health_checks: HealthCheckSettings = Field(default_factory=HealthCheckSettings)
    aimd: AimdSettings = Field(default_factory=AimdSettings)
    # Which failures send a request to the alias's next fallback (context-length errors always
    # go to `context_fallbacks`).
    fallback_on: tuple[FallbackOn, ...] = ("rate_limited", "overloaded", "unavailable", "timeout")
    # Seed of the balancer's and backoff's random choices (None: unpredictable).
    seed: int | None = None
