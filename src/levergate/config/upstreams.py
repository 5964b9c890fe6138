"""Upstreams (OpenAI-compatible HTTP) and model aliases: timeouts, pools, limits per key and
endpoint, answer caps, prices (`PriceSettings` lives with the catalog, `config.catalog`)."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, PrivateAttr, SecretStr, Tag, model_validator

from levergate.config.base import _Strict
from levergate.config.catalog import PriceSettings
from levergate.config.local import LocalUpstreamSettings

# Provider response headers passed on to the client (names, or prefixes ending in `*`): its
# rate limits and timings, which SDKs and dashboards read. The upstream's `x-request-id`
# arrives as `x-upstream-request-id` (levergate's own `x-request-id` names the call).
PASSED_RESPONSE_HEADERS = (
    "x-ratelimit-*",
    "retry-after",
    "retry-after-ms",
    "openai-processing-ms",
    "openai-version",
    "openai-model",
    "x-request-id",
)


class TimeoutsSettings(_Strict):
    """Seconds. `ttfb` bounds the wait for the response head, `idle` the gap between two chunks
    of a body, `total` the whole exchange including a streamed body."""

    connect: float = Field(5.0, gt=0)
    ttfb: float = Field(120.0, gt=0)
    idle: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class ResponseLimitsSettings(_Strict):
    """Bytes an upstream's answer may take in the gateway's memory. Beyond `body_bytes` a whole
    answer is refused with a 502 (`upstream_response_too_large`); of an error body only the
    first `error_body_bytes` are read (the connection is then dropped), which is plenty for an
    error message; a streamed event larger than `event_bytes` ends the stream with an error
    (502 before the first token, an error event after it). Measured before these existed: a
    300 MB error body peaked the gateway at 677 MB, a 300 MB unterminated event at 834 MB.
    The defaults sit far above real answers (a 128k-token completion is ~0.5 MB of JSON, one
    streamed chunk a few hundred bytes; embeddings of 2,048 inputs at 3,072 dimensions are
    ~60 MB as JSON text)."""

    body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    error_body_bytes: int = Field(1024 * 1024, ge=1024)
    event_bytes: int = Field(8 * 1024 * 1024, ge=1024)


class PoolSettings(_Strict):
    max_connections: int = Field(512, ge=1)
    keepalive_seconds: float = Field(60.0, gt=0)


class RateLimitsSettings(_Strict):
    """The limits of one scope: an API key, an endpoint, or a tenant. `None` turns one off.
    Rates hold over *any* `window_seconds`-long window (GCRA; see policies/gcra.py), which is
    what a provider's sliding-window limiter checks."""

    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # PER PROCESS, even with `traffic.store: redis` (which shares rpm and tpm only): N replicas
    # admit up to N x max_concurrency. Divide by the replica count to cap the fleet. (A shared
    # semaphore would need leases renewed for the life of every stream, and leaks a slot per
    # crashed replica until the lease ends: not worth it for a cap that is usually per server.)
    max_concurrency: int | None = Field(None, ge=1)
    # AIMD on 429s and timeouts (traffic.aimd), for upstreams whose capacity is unknown; it
    # starts at traffic.aimd.initial and stays under max_concurrency when that is set.
    adaptive_concurrency: bool = False
    window_seconds: float = Field(60.0, gt=0)
    # Share of the RPM limit that may go back to back (at least one request); the rest is
    # paced. The guarantee is burst + pace <= limit, so a burst costs steady throughput, but
    # a burst of one would lose every slot a waiter is late for (measured: 81% of the limit
    # at a 6 s window, against 98% with 1%).
    burst: float = Field(0.01, ge=0, le=1)
    # The same for TPM. A burst above one request's tokens lets concurrent requests start
    # together; a request larger than the burst waits until the bucket is idle.
    token_burst: float = Field(0.02, ge=0, le=1)
    # The window is stretched by this share, for the delay between the gateway's admission and
    # the provider's count (network jitter, clock skew); half of it lets a request that comes
    # back a little after its slot (a late timer, a busy loop) keep the slot (policies/gcra.py).
    margin: float = Field(0.01, ge=0, lt=0.5)
    # How a TPM charge is corrected from `usage` after the call: "reserved" keeps prompt plus
    # output cap (what providers that reserve at admission charge), "used" prompt plus output.
    tpm_charge: Literal["reserved", "used"] = "reserved"
    # The share of this scope's RPM, TPM and concurrency that background traffic (batch
    # lines, async requests, anything sent at the flex or batch tier) may not take: it is left
    # for the rest, so a batch flood no longer makes interactive requests wait for a whole
    # window. Background alone runs at (1 - this) of the limits (a concurrency cap keeps at
    # least one slot for it). Tenant limits have no reserve (a tenant's own traffic).
    interactive_reserve: float = Field(0.1, ge=0, lt=1)


class UpstreamSettings(_Strict):
    """An OpenAI-compatible endpoint. `base_url` includes the version path, e.g.
    `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`."""

    # The default kind: an upstream without `kind` in the file is this one.
    kind: Literal["openai"] = "openai"
    name: str  # what models name it by (`upstream:`), and its label in metrics and logs
    base_url: str
    # The provider key sent as `Authorization: Bearer` (never printed or logged).
    api_key: SecretStr | None = None
    # Read the key from this environment variable instead of the file (resolved at load; the
    # gateway refuses to start when it is unset or empty).
    api_key_env: str | None = None
    # "auto": HTTP/2 through ALPN on https:// upstreams, HTTP/1.1 keep-alive on http:// ones.
    http2: Literal["auto", "on", "off"] = "auto"
    # A PEM file of CA certificates to trust for this upstream instead of the system store.
    ca_bundle: str | None = None
    # Sent with every request to this upstream (values of credential-like names are redacted).
    headers: dict[str, str] = Field(default_factory=dict)
    # Response headers of this provider passed on to the client (see PASSED_RESPONSE_HEADERS);
    # `[]` passes none.
    response_headers: tuple[str, ...] = PASSED_RESPONSE_HEADERS
    timeouts: TimeoutsSettings = Field(default_factory=TimeoutsSettings)
    response_limits: ResponseLimitsSettings = Field(default_factory=ResponseLimitsSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    # More API keys of the same provider: each is balanced, limited and ejected on its own.
    api_keys: list[SecretStr] = Field(default_factory=list)
    api_keys_env: list[str] = Field(default_factory=list)  # each must be set, or no start
    # Limits of each API key (providers limit per key), and of the endpoint as a whole (all
    # its keys together, e.g. a self-hosted server's capacity).
    key_limits: RateLimitsSettings | None = None
    limits: RateLimitsSettings | None = None
    # `/v1/responses`: "native" passes Responses requests through unchanged (the upstream
    # serves the Responses API and keeps the conversation); "translate" turns them into chat
    # completions, which every OpenAI-compatible server speaks (config/responses.py).
    responses: Literal["native", "translate"] = "translate"

    # The keys `api_keys_env` named, read once at load (like `api_key_env`).
    _env_keys: list[SecretStr] = PrivateAttr(default_factory=list)
    # Variables `api_key_env` / `api_keys_env` named that were unset or empty at load: the
    # gateway refuses to start with any (`Settings.unset_variables`), tools that only read
    # prices from the same file do not.
    _unset_env: tuple[str, ...] = PrivateAttr(default=())

    def unset_variables(self) -> tuple[str, ...]:
        """`field: VARIABLE` for each key variable that was unset or empty at load."""
        return self._unset_env

    def all_keys(self) -> list[SecretStr | None]:
        """Every key to balance over, `api_key` first; `[None]` for a keyless endpoint."""
        keys: list[SecretStr | None] = [self.api_key] if self.api_key is not None else []
        keys += [*self.api_keys, *self._env_keys]
        return keys or [None]

    @model_validator(mode="after")
    def _key_from_env(self) -> UpstreamSettings:
        # Resolved at load, both of them: the keys a gateway balances over are the ones it
        # started with, whatever happens to the environment later.
        unset: list[str] = []
        if self.api_key is None and self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                object.__setattr__(self, "api_key", SecretStr(value))
            else:
                unset.append(f"api_key_env: {self.api_key_env}")
        keys: list[SecretStr] = []
        for index, name in enumerate(self.api_keys_env):
            if value := os.environ.get(name):
                keys.append(SecretStr(value))
            else:
                unset.append(f"api_keys_env[{index}]: {name}")
        self._env_keys, self._unset_env = keys, tuple(unset)
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream {self.name!r}: base_url must start with http:// or https://"
            )
        return self


# Anthropic's own response headers worth passing on: its rate limits (RFC 3339 reset times),
# the wait it asks for, and its `request-id` (arrives as `x-upstream-request-id`, as above).
ANTHROPIC_RESPONSE_HEADERS = ("anthropic-ratelimit-*", "retry-after", "request-id")


class AnthropicUpstreamSettings(UpstreamSettings):
    """Anthropic's Messages API as an upstream (`kind: anthropic`). The pipeline stays
    OpenAI-shaped: upstreams/anthropic.py translates each chat call to `POST /v1/messages` and
    the answer back (protocol/anthropic/upstream_request.py, anthropic/upstream_answer.py,
    anthropic/upstream_stream.py).

    `base_url` is the API root without the version path (`/v1` at its end is tolerated), as
    the `anthropic` SDK takes it. Keys go in `x-api-key`, every request carries
    `anthropic-version` (and `anthropic-beta` when set). Anthropic requires `max_tokens`; a
    request that sets neither `max_tokens` nor `max_completion_tokens` gets `default_max_tokens`
    (4096: what every current Claude model can produce, and far above a typical chat answer)."""

    kind: Literal["anthropic"] = "anthropic"  # type: ignore[assignment]  # the discriminator
    base_url: str = "https://api.anthropic.com"
    anthropic_version: str = "2023-06-01"
    anthropic_beta: tuple[str, ...] = ()
    default_max_tokens: int = Field(4096, ge=1)
    response_headers: tuple[str, ...] = ANTHROPIC_RESPONSE_HEADERS


def _upstream_kind(value: Any) -> str:
    """An upstream without `kind` is an OpenAI-compatible HTTP one."""
    if isinstance(value, dict):
        kind = value.get("kind", "openai")
        return kind if isinstance(kind, str) else "openai"
    return str(getattr(value, "kind", "openai"))


AnyUpstream = Annotated[
    Annotated[UpstreamSettings, Tag("openai")]
    | Annotated[AnthropicUpstreamSettings, Tag("anthropic")]
    | Annotated[LocalUpstreamSettings, Tag("local")],
    Discriminator(_upstream_kind),
]


# How a model alias chooses among its endpoint keys (policies/balancing.py STRATEGIES).
BalanceStrategy = Literal["p2c", "least_outstanding", "weighted", "round_robin", "affinity"]


class TargetSettings(_Strict):
    """One endpoint a model alias may be served by; `weight` biases the balancer."""

    upstream: str
    weight: float = Field(1.0, gt=0)
    upstream_model: str | None = None  # the alias's `upstream_model` when unset


class ModelSettings(_Strict):
    """A model alias clients may name. `name: "*"` catches every model not listed, and sends it
    upstream under the name the client used. `upstream` names one endpoint; `endpoints` lists
    several to balance over (give one or the other; the first endpoint is `upstream`)."""

    name: str  # what clients send as `model`
    upstream: str = ""  # the upstream that serves it (or list several in `endpoints`)
    upstream_model: str | None = None  # the model name sent upstream (default: `name`)
    # Its catalog entry (levergate/catalog, `catalog:` in the settings): named here, or found
    # by `upstream_model`, then by this alias's name. `price` overrides the entry's field by
    # field; an alias with neither is unpriced (self-hosted: costs nothing, logged at start).
    catalog: str | None = None
    price: PriceSettings = Field(default_factory=PriceSettings)
    endpoints: list[TargetSettings] = Field(default_factory=list)
    # Other aliases to try, in order, when this one fails (traffic.fallback_on), and the ones
    # to use when a request exceeds this model's context window.
    fallbacks: list[str] = Field(default_factory=list)
    context_fallbacks: list[str] = Field(default_factory=list)
    # This alias's balancing strategy (traffic.balance.strategy when unset): `affinity` for
    # self-hosted replicas or API keys whose prompt caches should stay warm.
    balance: BalanceStrategy | None = None

    @model_validator(mode="after")
    def _one_or_many(self) -> ModelSettings:
        if not self.endpoints and not self.upstream:
            raise ValueError(f"model {self.name!r} needs `upstream` or `endpoints`")
        if not self.endpoints:
            target = TargetSettings(upstream=self.upstream, upstream_model=self.upstream_model)
            object.__setattr__(self, "endpoints", [target])
        elif not self.upstream:
            object.__setattr__(self, "upstream", self.endpoints[0].upstream)
        return self
