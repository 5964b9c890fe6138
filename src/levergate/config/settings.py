"""The root of the tree: `Settings` and how it is loaded (YAML file, `LEVERGATE_*` environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from levergate.config.base import WILDCARD
from levergate.config.batch import BatchSettings
from levergate.config.cache import CacheSettings
from levergate.config.cascade import CascadeSettings, check_references
from levergate.config.catalog import CatalogEntrySettings, LedgerSettings
from levergate.config.dashboard import DashboardSettings
from levergate.config.deferral import (
    AsyncRequestsSettings,
    DeferSettings,
    WebhooksSettings,
    check_deferral,
)
from levergate.config.environment import Environment
from levergate.config.keys import AdminSettings, AuthSettings
from levergate.config.microbatch import MicroBatchSettings
from levergate.config.otel import OtelSettings
from levergate.config.prompt_cache import PromptCacheSettings
from levergate.config.request_log import RequestLogSettings
from levergate.config.responses import ResponsesSettings
from levergate.config.routing import RoutingSettings
from levergate.config.server import (
    BackgroundSettings,
    MetricsSettings,
    RequestLimitsSettings,
    ServerSettings,
)
from levergate.config.stores import Stores
from levergate.config.tiers import TiersSettings
from levergate.config.traffic import TrafficSettings
from levergate.config.trim import TrimSettings
from levergate.config.upstreams import AnyUpstream, ModelSettings, UpstreamSettings
from levergate.errors import ConfigError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LEVERGATE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    # Named store connections (redis, postgres, memcached, a SQLite folder) that every piece of
    # shared state names; `default` is the one a section naming none takes (config/stores.py).
    stores: Stores = Field(default_factory=dict)
    # Where requests go: OpenAI-compatible servers (the default kind), Anthropic's API, or the
    # embedded engine. None at all: `levergate serve` runs the embedded default.
    upstreams: list[AnyUpstream] = Field(default_factory=list)
    # The model names clients may use, each served by one or more upstreams (`*`: any other).
    models: list[ModelSettings] = Field(default_factory=list)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    limits: RequestLimitsSettings = Field(default_factory=RequestLimitsSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    # OpenTelemetry traces to an OTLP/HTTP collector (off without an endpoint).
    otel: OtelSettings = Field(default_factory=OtelSettings)
    # Every finished request's record in a database (levergate/requestlog/; off by default,
    # on for the embedded default): `GET /admin/log`, `levergate log`, `levergate report`.
    request_log: RequestLogSettings = Field(default_factory=RequestLogSettings)
    # The live dashboard at /dashboard and its keys page (levergate/dashboard/).
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    traffic: TrafficSettings = Field(default_factory=TrafficSettings)
    cascade: CascadeSettings = Field(default_factory=CascadeSettings)
    prompt_cache: PromptCacheSettings = Field(default_factory=PromptCacheSettings)
    microbatch: MicroBatchSettings = Field(default_factory=MicroBatchSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    background: BackgroundSettings = Field(default_factory=BackgroundSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    # Deferral to provider batch APIs, async single requests, their webhooks (on `batch`).
    defer: DeferSettings = Field(default_factory=DeferSettings)
    async_requests: AsyncRequestsSettings = Field(default_factory=AsyncRequestsSettings)
    webhooks: WebhooksSettings = Field(default_factory=WebhooksSettings)
    # Models added to or overriding the built-in catalog (config/catalog.py), and the ledger.
    catalog: dict[str, CatalogEntrySettings] = Field(default_factory=dict)
    ledger: LedgerSettings = Field(default_factory=LedgerSettings)
    # Service tiers (flex, standard, priority, provider batch) chosen by each request's
    # deadline, and the tier price caps of each alias (config/tiers.py).
    tiers: TiersSettings = Field(default_factory=TiersSettings)
    # The Responses API: its bounds and where translated conversations are kept.
    responses: ResponsesSettings = Field(default_factory=ResponsesSettings)
    trim: TrimSettings = Field(default_factory=TrimSettings)
    # The least severe log records `levergate serve` writes (the access log is written at any
    # level when `server.access_log` is on).
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # How `levergate serve` writes its log lines to stderr: text, or one JSON object per line
    # (time, level, logger, message and the record's fields) for a log shipper (levergate/logs.py).
    log_format: Literal["text", "json"] = "text"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Explicit values (flags, code) over the environment. `load` itself puts the file's
        # values under the environment's (config/environment.py), so the order is
        # flags > environment > file > defaults.
        del settings_cls, dotenv_settings
        return init_settings, env_settings, file_secret_settings

    @model_validator(mode="after")
    def _references_resolve(self) -> Settings:
        names = [u.name for u in self.upstreams]
        if len(names) != len(set(names)):
            raise ValueError("upstream names must be unique")
        aliases = [m.name for m in self.models]
        if len(aliases) != len(set(aliases)):
            raise ValueError("model names must be unique")
        for model in self.models:
            for target in model.endpoints:
                if target.upstream not in names:
                    raise ValueError(
                        f"model {model.name!r} names unknown upstream {target.upstream!r}"
                    )
            for alias in (*model.fallbacks, *model.context_fallbacks):
                if alias not in aliases or alias == model.name:
                    raise ValueError(f"model {model.name!r}: unknown fallback {alias!r}")
        check_references(self.cascade, aliases)
        for alias in self.microbatch.models:
            if alias not in aliases:
                raise ValueError(f"microbatch.models names unknown model {alias!r}")
        self.trim.check_aliases(aliases)
        self.routing.check([a for a in aliases if a != WILDCARD])
        judge = self.cache.semantic.calibration.judge
        if judge is not None and judge not in aliases:
            raise ValueError(f"cache.semantic.calibration.judge names unknown model {judge!r}")
        check_deferral(self.batch, self.defer, self.async_requests, aliases)
        for alias in self.tiers.routes:
            if alias not in aliases and WILDCARD not in aliases:
                raise ValueError(f"tiers.routes names unknown model {alias!r}")
        self._connections_exist()
        return self

    def _connections_exist(self) -> None:
        named = {
            "cache.store": self.cache.store.connection,
            "auth.store": self.auth.store.connection,
            "auth.spend": self.auth.spend.connection,
            "responses.store": self.responses.store.connection,
            "traffic": self.traffic.connection,
            "batch.store": self.batch.store.connection,
        }
        for section, name in named.items():
            if name is not None and name not in self.stores:
                known = ", ".join(sorted(self.stores)) or "none"
                raise ValueError(
                    f"{section}.connection names {name!r}, which `stores` does not define "
                    f"(defined: {known})"
                )

    def unset_variables(self) -> list[str]:
        """Key variables the configuration names that were unset or empty at load, as
        `upstreams[0] (name).api_key_env: VARIABLE`. `Gateway` refuses to start with any: an
        upstream whose key is missing refuses every request (a 502 each, after a round trip),
        which a warning in a log would leave for the first users to find."""
        return [
            f"upstreams[{index}] ({upstream.name}).{unset}"
            for index, upstream in enumerate(self.upstreams)
            if isinstance(upstream, UpstreamSettings)
            for unset in upstream.unset_variables()
        ]

    def require_variables(self) -> None:
        """A `ConfigError` naming every key variable that is unset (`unset_variables`)."""
        unset = self.unset_variables()
        if unset:
            lines = "\n".join(f"  {line}: not set" for line in unset)
            raise ConfigError(
                "the configuration names key variables the environment does not set (every "
                f"request to these upstreams would be refused):\n{lines}\n"
                "Set them, or remove the field from an upstream that needs no key."
            )

    @classmethod
    def load(cls, path: str | Path | None = None, **values: Any) -> Settings:
        """Settings from a YAML file (optional), under the `LEVERGATE_*` environment, under
        `values` (what the caller says explicitly: `levergate serve` flags, code). Any problem
        becomes one `ConfigError` that says where, and which variable a bad value came from."""
        return cls._build(_read_yaml(Path(path)) if path else {}, values, path)

    @classmethod
    def for_upstream(cls, base_url: str, path: str | Path | None = None, **values: Any) -> Settings:
        """`levergate serve --upstream URL`: every model not otherwise listed goes to one
        OpenAI-compatible base URL, under the name the client used."""
        return cls._build(_read_yaml(Path(path)) if path else {}, values, path, upstream=base_url)

    @classmethod
    def _build(
        cls,
        file: dict[str, Any],
        values: dict[str, Any],
        path: str | Path | None,
        *,
        upstream: str | None = None,
    ) -> Settings:
        environment = Environment.read(cls)
        data = _merged(_merged(file, environment.values), values)
        if upstream is not None:
            data = _with_upstream(data, upstream)
        try:
            return cls(**data)
        except ValidationError as exc:
            where = f" in {path}" if path else ""
            explicit = _with_upstream(values, upstream) if upstream is not None else values
            lines = _describe(exc, environment=environment, explicit=explicit)
            raise ConfigError(f"invalid configuration{where}:\n{lines}") from None


def _with_upstream(data: dict[str, Any], base_url: str) -> dict[str, Any]:
    """`data` with the `--upstream` endpoint first and a `*` model routed to it."""
    upstream = {"name": "default", "base_url": base_url.rstrip("/")}
    models = [
        m for m in data.get("models", []) if not (isinstance(m, dict) and m.get("name") == WILDCARD)
    ]
    return {
        **data,
        "upstreams": [upstream, *data.get("upstreams", [])],
        "models": [{"name": WILDCARD, "upstream": "default"}, *models],
    }


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


def _describe(exc: ValidationError, *, environment: Environment, explicit: dict[str, Any]) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        variable = environment.variable_for(error["loc"], explicit=explicit)
        source = f" (from the environment: {variable})" if variable else ""
        lines.append(f"  {where}: {error['msg']}{source}")
    return "\n".join(lines)
