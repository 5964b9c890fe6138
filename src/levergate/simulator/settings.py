"""Every default of the provider simulator, in one typed, frozen object.

`SimSettings` is what the CLI flags, a `--config` YAML file and the live `POST /sim/config`
endpoint all produce; the simulator swaps the whole object atomically, so a request always sees
one consistent configuration. Defaults are the fast path: zero latency, no limits, no faults,
so tests and throughput benchmarks run as fast as the machine allows; each realism knob is
opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from levergate.config import DEFAULT_HOST, DEFAULT_SIM_PORT
from levergate.errors import ConfigError

SIMULATED_HEADER = "x-simulated"
SIMULATED_VALUE = "levergate-sim"
SYSTEM_FINGERPRINT = "levergate-sim"
DEFAULT_MODELS = ("sim-small", "sim-large", "sim-embed", "gpt-4o-mini", "text-embedding-3-small")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencySettings(_Frozen):
    """TTFT = (ttft_ms + prefill_ms_per_token * uncached prompt tokens) * jitter; then one output
    token every 1/tokens_per_second seconds (each gap jittered). All zeros is the fast path.
    `per_request`: the jitter (and a flex queue wait) is drawn from a hash of the seed, the
    model, the tier and the prompt instead of the shared sequence, so a request's latency is
    the same whatever else runs (`tiers.request_timing` computes it: an oracle for
    benchmarks)."""

    ttft_ms: float = Field(0.0, ge=0)
    prefill_ms_per_token: float = Field(0.0, ge=0)
    # 0 means instant decoding (no pacing between tokens).
    tokens_per_second: float = Field(0.0, ge=0)
    # Sigma of a log-normal multiplier (median 1): 0.2 gives roughly +-20% with a right tail.
    jitter: float = Field(0.0, ge=0, le=2)
    per_request: bool = False

    @property
    def is_zero(self) -> bool:
        return self.ttft_ms == 0 and self.prefill_ms_per_token == 0 and self.tokens_per_second == 0


class LimitSettings(_Frozen):
    """Per API key, like hosted providers; `None` turns a limit off. TPM charges the prompt plus
    the requested output cap at admission (what OpenAI and others reserve)."""

    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # Requests being answered at once, across keys; over it the simulator answers 429.
    max_concurrency: int | None = Field(None, ge=1)
    window_seconds: float = Field(60.0, gt=0)

    @property
    def any_rate(self) -> bool:
        return self.rpm is not None or self.tpm is not None


class FaultSettings(_Frozen):
    """Probabilities per generation request, drawn from the simulator's seeded RNG. They are
    exclusive outcomes, so they must sum to at most 1."""

    error_rate: float = Field(0.0, ge=0, le=1)  # 500 or 503 with an OpenAI error body
    hang_rate: float = Field(0.0, ge=0, le=1)  # never answer until the client goes away
    disconnect_rate: float = Field(0.0, ge=0, le=1)  # close the socket mid-body
    malformed_rate: float = Field(0.0, ge=0, le=1)  # 200 with a body that is not JSON
    slow_rate: float = Field(0.0, ge=0, le=1)  # add `slow_ms` before the first token
    # 529 overloaded_error, Anthropic's "the API is temporarily overloaded" (on any route).
    overloaded_rate: float = Field(0.0, ge=0, le=1)
    # A cut stream closes after this many SSE frames (the role frame counts).
    disconnect_after_chunks: int = Field(2, ge=0)
    slow_ms: float = Field(2000.0, ge=0)

    @model_validator(mode="after")
    def _exclusive(self) -> FaultSettings:
        if self.total_rate > 1.0 + 1e-9:
            raise ValueError("fault rates are exclusive outcomes and must sum to at most 1")
        return self

    @property
    def total_rate(self) -> float:
        return (self.error_rate + self.hang_rate + self.disconnect_rate + self.malformed_rate) + (
            self.slow_rate + self.overloaded_rate
        )


class PromptCacheSettings(_Frozen):
    """OpenAI's automatic prompt caching: exact prefixes of >= 1024 tokens, hits counted in
    128-token steps, entries scoped by API key and model, forgotten after `ttl_seconds`."""

    enabled: bool = True
    min_tokens: int = Field(1024, ge=1)
    increment: int = Field(128, ge=1)
    ttl_seconds: float = Field(600.0, gt=0)
    max_entries: int = Field(100_000, ge=1)
    # OpenAI's cache routing (cache_routing.py): a prompt is served by one of `machines`, each
    # with its own cache, chosen by its first `route_tokens` tokens and its `prompt_cache_key`;
    # past `overflow_per_minute` requests a minute for one such pair, the rest overflow to
    # other machines. 1 (the default): one cache per key and model, no routing.
    machines: int = Field(1, ge=1, le=4096)
    route_tokens: int = Field(256, ge=1)
    overflow_per_minute: int = Field(15, ge=1, le=100_000)
    # Anthropic's convention on /v1/messages (anthropic_cache.py): explicit `cache_control`
    # breakpoints, a prefix cacheable from this many tokens (1024: Sonnet and Opus; the Haiku
    # models need 2048 or 4096), entries living 5 minutes or 1 hour as the breakpoint asks.
    anthropic_min_tokens: int = Field(1024, ge=1)


class HardPromptSettings(_Frozen):
    """Which prompts the simulated model finds hard, so a cascade can be tested end to end: a
    prompt containing `marker`, plus a seeded `share` of the others (chosen by a hash of the
    prompt, so the same prompt is always hard or always easy). An answer's token logprobs
    (sent when a request asks `logprobs: true`) average `easy_logprob` or `hard_logprob`;
    with `json_answers`, chat answers are `{"answer": "...", "confidence": p}` with p the
    geometric-mean token probability, and a hard answer's JSON is cut short (invalid).
    Models in `strong_models` find nothing hard. Off by default: nothing is computed then."""

    marker: str | None = Field(None, min_length=1, max_length=256)
    share: float = Field(0.0, ge=0, le=1)
    easy_logprob: float = Field(-0.1, le=0, ge=-20)
    hard_logprob: float = Field(-2.0, le=0, ge=-20)
    json_answers: bool = False
    strong_models: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.marker is not None or self.share > 0


class BatchApiSettings(_Frozen):
    """The provider batch APIs (batch_api.py): a batch ends this long after it was created,
    on the simulator's clock (virtual time under a ManualClock)."""

    turnaround_seconds: float = Field(0.0, ge=0)


class FlexSettings(_Frozen):
    """OpenAI's flex processing (`service_tier: "flex"`): its answers take `slowdown` times the
    standard latency plus a queue wait before the first token (log-normal: median `queue_ms`,
    sigma `queue_spread`), and its capacity runs out: beyond `max_concurrency` flex requests
    at once (across keys), or for a seeded share `refusal_rate` of them, a request is refused
    at once — OpenAI's 429 "Resource unavailable" (`refusal: openai`) or Groq's 498
    `capacity_exceeded` (`refusal: groq`). Refusals are not billed."""

    # The models sold at flex (None: every model); asking another is OpenAI's 400.
    models: tuple[str, ...] | None = None
    slowdown: float = Field(1.0, ge=1.0, le=1000)
    queue_ms: float = Field(0.0, ge=0)
    queue_spread: float = Field(0.0, ge=0, le=3)
    max_concurrency: int | None = Field(None, ge=0)
    refusal_rate: float = Field(0.0, ge=0, le=1)
    refusal: Literal["openai", "groq"] = "openai"


class PrioritySettings(_Frozen):
    """OpenAI's priority processing (`service_tier: "priority"`): `speedup` times faster."""

    models: tuple[str, ...] | None = None
    speedup: float = Field(1.0, ge=1.0, le=100)


class SimPriceSettings(_Frozen):
    """US dollars per million tokens (`cached_input` unset: billed as input)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)


class TierSettings(_Frozen):
    """Service tiers (tiers.py). Every answer says which tier served it (`service_tier`:
    "default", "flex" or "priority"; in every chunk of a stream) unless `report` is off, a
    provider that says nothing. `GET /sim/stats` counts requests, tokens and dollars by tier,
    at `prices` (the provider's own list: model -> tier -> price; unlisted costs $0)."""

    flex: FlexSettings = Field(default_factory=FlexSettings)
    priority: PrioritySettings = Field(default_factory=PrioritySettings)
    report: bool = True
    prices: dict[str, dict[Literal["default", "flex", "priority"], SimPriceSettings]] = Field(
        default_factory=dict
    )


class IsolationSettings(_Frozen):
    """A provider serves each request on hardware of its own: one customer's huge prompt never
    makes another's small request wait. The simulator answers on one event loop, so a chat or
    completion request whose body is at least `min_bytes` is parsed, counted, hashed and given
    its words in one of `workers` processes (simulator/isolation.py) while the loop answers
    everyone else; the state (limits, the prompt cache, ids, stats) stays on the loop. The
    answer is the same either way. None: every request on the loop.

    The workers run at `nice` (added to the simulator's own niceness): on a machine whose cores
    the loop shares with them, the loop answering small requests gets the CPU first, and a
    large request waits a little longer for its words, as behind a provider's own queue. At
    most `max_waiting` large requests are prepared or wait for a worker at once; one more is
    answered 503 (a provider's "overloaded"), so a flood of large bodies is not held in memory
    and CPU without bound."""

    min_bytes: int | None = Field(1 << 20, ge=1024)
    workers: int = Field(2, ge=1, le=64)
    # An embeddings request costs the loop by its inputs, not its bytes: 128 short inputs (a
    # 2.5 KB body) are 128 vectors of 1,536 dimensions, 70-270 ms of hashing and encoding
    # (the soak's hostile tenant). At least this many bytes (about 60 short inputs) go to a
    # worker; the loop keeps what is smaller. None: every embeddings request on the loop.
    embeddings_min_bytes: int | None = Field(1024, ge=64)
    # Start the workers with the server rather than at the first large request (their start
    # costs a second or two of CPU each: imports): a provider's hardware is already up.
    prestart: bool = False
    nice: int = Field(10, ge=0, le=19)
    max_waiting: int = Field(16, ge=1, le=4096)


class SimSettings(_Frozen):
    host: str = DEFAULT_HOST
    port: int = Field(DEFAULT_SIM_PORT, ge=0, le=65535)
    seed: int = 0
    latency: LatencySettings = Field(default_factory=LatencySettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    prompt_cache: PromptCacheSettings = Field(default_factory=PromptCacheSettings)
    hard: HardPromptSettings = Field(default_factory=HardPromptSettings)
    batch_api: BatchApiSettings = Field(default_factory=BatchApiSettings)
    # The share of each answer's completion tokens reported as reasoning tokens
    # (`completion_tokens_details.reasoning_tokens`, counted inside `completion_tokens` as
    # OpenAI does): priced as output, never on top of it.
    reasoning_share: float = Field(0.0, ge=0, le=1)
    tiers: TierSettings = Field(default_factory=TierSettings)
    # Output tokens when the request sets no max_tokens / max_completion_tokens.
    max_tokens_default: int = Field(16, ge=1)
    # Largest output cap a request may ask for (400 above it, as providers do).
    max_output_tokens: int = Field(16_384, ge=1)
    # Prompt + output cap above this is a 400 context_length_exceeded; None: unlimited.
    context_window: int | None = Field(None, ge=1)
    embedding_dim: int = Field(1536, ge=1, le=16_384)
    models: tuple[str, ...] = DEFAULT_MODELS
    # False: any model name is served (listed or not); True: unknown models get a 404.
    strict_models: bool = False
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    isolation: IsolationSettings = Field(default_factory=IsolationSettings)
    # True: bodies and stream events are written the way Python's `json.dumps` writes them
    # (`"usage": {...}`, `", "` separators), as FastAPI / sse-starlette servers such as
    # llama_cpp.server do; False: compact JSON, as OpenAI writes it.
    spaced_json: bool = False

    def patched(self, patch: Mapping[str, Any]) -> SimSettings:
        """A copy with `patch` deep-merged in and validated again (raises ValidationError)."""
        return SimSettings.model_validate(_deep_merge(self.model_dump(), patch))

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, overrides: Mapping[str, Any] = {}
    ) -> SimSettings:
        """Settings from an optional YAML file with `overrides` (nested dicts) merged on top; any
        problem becomes one `ConfigError` saying where."""
        data: dict[str, Any] = {}
        if path is not None:
            data = _read_yaml(Path(path))
        try:
            return cls.model_validate(_deep_merge(data, overrides))
        except ValidationError as exc:
            where = f" in {path}" if path else ""
            raise ConfigError(f"invalid simulator settings{where}:\n{describe(exc)}") from None


def _deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in patch.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read simulator config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"simulator config {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"simulator config {path} must hold a mapping at the top level")
    return data


def describe(exc: ValidationError) -> str:
    """One line per problem, `dotted.path: message`, for CLI output and 400 bodies."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)
