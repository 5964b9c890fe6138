"""The settings tree. Every default of the gateway lives in this module, and nowhere else reads
the environment.

Sources, highest priority first: `LEVERGATE_*` environment variables (nested with `__`, e.g.
`LEVERGATE_SERVER__PORT=9000`), then values given in code or read from the YAML file
(`Settings.load(path)`), then the defaults below. Secrets are `SecretStr`: they print as
`**********`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from levergate.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SIM_PORT = 8089
WILDCARD = "*"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    """Seconds. `ttfb` bounds the wait for the response head, `idle` the gap between two chunks
    of a body, `total` the whole exchange including a streamed body."""

    connect: float = Field(5.0, gt=0)
    ttfb: float = Field(120.0, gt=0)
    idle: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class Pool(_Strict):
    max_connections: int = Field(512, ge=1)
    keepalive_seconds: float = Field(60.0, gt=0)


class Upstream(_Strict):
    """An OpenAI-compatible endpoint. `base_url` includes the version path, e.g.
    `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`."""

    name: str
    base_url: str
    api_key: SecretStr | None = None
    # Read the key from this environment variable instead of the file (resolved at load).
    api_key_env: str | None = None
    # "auto": HTTP/2 through ALPN on https:// upstreams, HTTP/1.1 keep-alive on http:// ones.
    http2: Literal["auto", "on", "off"] = "auto"
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    pool: Pool = Field(default_factory=Pool)

    @model_validator(mode="after")
    def _key_from_env(self) -> Upstream:
        if self.api_key is None and self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                object.__setattr__(self, "api_key", SecretStr(value))
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream {self.name!r}: base_url must start with http:// or https://"
            )
        return self


class Price(_Strict):
    """US dollars per million tokens."""

    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)  # defaults to `input` when unset

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        cached_price = self.input if self.cached_input is None else self.cached_input
        fresh = max(0, input_tokens - cached_tokens)
        return (
            fresh * self.input + cached_tokens * cached_price + output_tokens * self.output
        ) / 1e6


class Model(_Strict):
    """A model alias clients may name. `name: "*"` catches every model not listed, and sends it
    upstream under the name the client used."""

    name: str
    upstream: str
    upstream_model: str | None = None
    price: Price = Field(default_factory=Price)


class Server(_Strict):
    host: str = DEFAULT_HOST
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # Seconds an in-flight request may take to finish when the server stops.
    graceful_shutdown_seconds: float = Field(10.0, ge=0)
    access_log: bool = False


class ApiKey(_Strict):
    key: SecretStr
    tenant: str = "default"


class Auth(_Strict):
    """When enabled, every /v1 request needs `Authorization: Bearer <key>` of a listed key, and the
    key decides the tenant. When disabled, `x-levergate-tenant` may name one."""

    enabled: bool = False
    keys: list[ApiKey] = Field(default_factory=list)


class Metrics(_Strict):
    enabled: bool = True
    # Histogram buckets in seconds, fine at the low end where gateway overhead lives.
    latency_buckets: tuple[float, ...] = (
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
        1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    )  # fmt: skip
    overhead_buckets: tuple[float, ...] = (
        0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
    )  # fmt: skip


CacheMode = Literal["off", "deterministic", "always"]


class CacheRule(_Strict):
    """When answers may be cached. `deterministic` (the default) caches only requests that ask
    for one answer: temperature 0 or a fixed seed. `always` also caches sampled answers (for
    callers who want the same answer to the same question); `off` never reads nor writes."""

    mode: CacheMode = "deterministic"
    ttl_seconds: float = Field(24 * 3600.0, gt=0)
    # An answer that calls tools is usually about live state; cache it only when told to.
    cache_tool_calls: bool = False
    # Requests for several choices (n > 1) ask for variety; cache them only when told to.
    cache_n: bool = False
    # Opt in to the semantic cache for this model / feature (never on by default).
    semantic: bool = False


class CacheStore(_Strict):
    """Where exact entries live. `sqlite` survives restarts (set it for `levergate serve`);
    `redis` is shared by replicas; `memory` is per gateway instance. The default is `memory` so
    that gateways built in one process (tests, library users) never see each other's entries
    and nothing writes a file unasked. A bounded in-memory LRU sits in front of sqlite and redis
    when `front_bytes` > 0."""

    backend: Literal["memory", "sqlite", "redis"] = "memory"
    memory_bytes: int = Field(256 * 1024 * 1024, ge=0)
    front_bytes: int = Field(64 * 1024 * 1024, ge=0)
    # How long an entry may stay in the front LRU before the back store is asked again.
    front_ttl_seconds: float = Field(60.0, gt=0)
    sqlite_path: str = "levergate-cache.sqlite3"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:cache:"
    # A store slower than this is treated as down for the request (a miss, never a failure).
    timeout_seconds: float = Field(0.05, gt=0)
    # After a store failure, skip the store for this long instead of waiting on it again.
    cooldown_seconds: float = Field(1.0, ge=0)


class SemanticCacheSettings(_Strict):
    """Nearest-neighbour lookup of the final user text. Threshold and guards were chosen on the
    labelled paraphrase data (benchmarks/results/cache_semantic_eval.md): false hits <= 1% of
    the non-duplicate pairs of qqp_dev."""

    threshold: float = Field(0.95, gt=0, le=1)
    guards: bool = True
    top_k: int = Field(4, ge=1)
    embedder: Literal["local", "upstream"] = "local"
    # For `embedder: upstream`: the model alias sent to this gateway's own /v1/embeddings route.
    embedding_model: str = ""
    max_entries: int = Field(100_000, ge=1)
    # Above this many entries in one partition the exact numpy index becomes an HNSW graph.
    hnsw_above: int = Field(20_000, ge=1)
    # Optional: ask this model whether the cached answer answers the new question.
    verify_model: str | None = None


class Cache(_Strict):
    """The exact cache, in-flight coalescing, the embeddings cache and the semantic cache."""

    enabled: bool = True
    store: CacheStore = Field(default_factory=CacheStore)
    default: CacheRule = Field(default_factory=CacheRule)
    # Overrides by model alias, and by feature tag (a feature rule wins over a model rule).
    models: dict[str, CacheRule] = Field(default_factory=dict)
    features: dict[str, CacheRule] = Field(default_factory=dict)
    # Tenants never share entries; map several tenants to one namespace to let them.
    tenant_namespaces: dict[str, str] = Field(default_factory=dict)
    coalesce: bool = True
    embeddings: bool = True
    embeddings_ttl_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LEVERGATE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: Server = Field(default_factory=Server)
    upstreams: list[Upstream] = Field(default_factory=list)
    models: list[Model] = Field(default_factory=list)
    auth: Auth = Field(default_factory=Auth)
    metrics: Metrics = Field(default_factory=Metrics)
    cache: Cache = Field(default_factory=Cache)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins, so an operator can override any file or code value.
        del settings_cls, dotenv_settings
        return env_settings, init_settings, file_secret_settings

    @model_validator(mode="after")
    def _references_resolve(self) -> Settings:
        names = [u.name for u in self.upstreams]
        if len(names) != len(set(names)):
            raise ValueError("upstream names must be unique")
        aliases = [m.name for m in self.models]
        if len(aliases) != len(set(aliases)):
            raise ValueError("model names must be unique")
        for model in self.models:
            if model.upstream not in names:
                raise ValueError(f"model {model.name!r} names unknown upstream {model.upstream!r}")
        return self

    @classmethod
    def load(cls, path: str | Path | None = None, **values: Any) -> Settings:
        """Settings from a YAML file (optional) with `values` merged over it, all under the
        environment. Any problem becomes one `ConfigError` that says where."""
        data = _merged(_read_yaml(Path(path)) if path else {}, values)
        return cls._build(data, path)

    @classmethod
    def for_upstream(cls, base_url: str, path: str | Path | None = None, **values: Any) -> Settings:
        """`levergate serve --upstream URL`: every model not otherwise listed goes to one
        OpenAI-compatible base URL, under the name the client used."""
        data = _merged(_read_yaml(Path(path)) if path else {}, values)
        upstream = {"name": "default", "base_url": base_url.rstrip("/")}
        data["upstreams"] = [upstream, *data.get("upstreams", [])]
        models = [
            m
            for m in data.get("models", [])
            if not (isinstance(m, dict) and m.get("name") == WILDCARD)
        ]
        data["models"] = [{"name": WILDCARD, "upstream": "default"}, *models]
        return cls._build(data, path)

    @classmethod
    def _build(cls, data: dict[str, Any], path: str | Path | None) -> Settings:
        try:
            return cls(**data)
        except ValidationError as exc:
            where = f" in {path}" if path else ""
            raise ConfigError(f"invalid configuration{where}:\n{_describe(exc)}") from None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)
