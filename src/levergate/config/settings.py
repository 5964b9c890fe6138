"""The root of the tree: `Settings` and how it is loaded (YAML file, `LEVERGATE_*` environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from levergate.config.base import WILDCARD
from levergate.config.batch import Batch
from levergate.config.cache import Cache
from levergate.config.cascade import CascadeSettings, check_references
from levergate.config.catalog import CatalogEntry, Ledger
from levergate.config.deferral import AsyncRequests, Defer, Webhooks, check_deferral
from levergate.config.keys import Admin, Auth
from levergate.config.microbatch import MicroBatchSettings
from levergate.config.prompt_cache import PromptCache
from levergate.config.responses import ResponsesSettings
from levergate.config.routing import Routing
from levergate.config.server import Background, Metrics, RequestLimits, Server
from levergate.config.traffic import Traffic
from levergate.config.trim import Trim
from levergate.config.upstreams import AnyUpstream, Model
from levergate.errors import ConfigError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LEVERGATE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: Server = Field(default_factory=Server)
    upstreams: list[AnyUpstream] = Field(default_factory=list)
    models: list[Model] = Field(default_factory=list)
    auth: Auth = Field(default_factory=Auth)
    limits: RequestLimits = Field(default_factory=RequestLimits)
    admin: Admin = Field(default_factory=Admin)
    metrics: Metrics = Field(default_factory=Metrics)
    cache: Cache = Field(default_factory=Cache)
    traffic: Traffic = Field(default_factory=Traffic)
    cascade: CascadeSettings = Field(default_factory=CascadeSettings)
    prompt_cache: PromptCache = Field(default_factory=PromptCache)
    microbatch: MicroBatchSettings = Field(default_factory=MicroBatchSettings)
    routing: Routing = Field(default_factory=Routing)
    background: Background = Field(default_factory=Background)
    batch: Batch = Field(default_factory=Batch)
    # Deferral to provider batch APIs, async single requests, their webhooks (on `batch`).
    defer: Defer = Field(default_factory=Defer)
    async_requests: AsyncRequests = Field(default_factory=AsyncRequests)
    webhooks: Webhooks = Field(default_factory=Webhooks)
    # Models added to or overriding the built-in catalog (config/catalog.py), and the ledger.
    catalog: dict[str, CatalogEntry] = Field(default_factory=dict)
    ledger: Ledger = Field(default_factory=Ledger)
    # The Responses API: its bounds and where translated conversations are kept.
    responses: ResponsesSettings = Field(default_factory=ResponsesSettings)
    trim: Trim = Field(default_factory=Trim)
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
        check_deferral(self.batch, self.defer, self.async_requests, aliases)
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
