"""`BenchConfig`: every knob of one load-generator run, with its defaults named here.

The bench is a client of the gateway, not part of it, so its settings live beside it rather than
in `levergate.config` (which is the gateway's tree). The CLI and benchmark scripts both build a
`BenchConfig`; `validate` rejects contradictory combinations before any socket is opened, with
a `ConfigError` the CLI prints as a one-line message.

Which load model runs is decided by three fields, in this order:

- `rate` set: open loop, arrivals at a fixed rate (wrk2 `-R`);
- else `trace` set and `concurrency` unset: open loop, arrivals at the trace's own times
  (multiplied by `time_scale`);
- else: closed loop with `concurrency` workers (default 1).

A trace, when given, also supplies per-request prompt and output lengths unless
`prompt_tokens` / `max_tokens` override them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr

from levergate.errors import ConfigError

Endpoint = Literal["chat", "completions", "embeddings"]
Mode = Literal["closed", "rate", "trace"]
ArrivalProcess = Literal["uniform", "poisson"]

DEFAULT_MODEL = "default"
DEFAULT_PROMPT_TOKENS = 128
DEFAULT_MAX_TOKENS = 64
DEFAULT_DURATION_S = 10.0
DEFAULT_CONCURRENCY = 1
DEFAULT_MAX_OUTSTANDING = 1024
DEFAULT_TIMEOUT_S = 60.0
# A request launched more than this after its intended time counts as "late". Event-loop
# timers (uvloop's are millisecond-granular) put a normal launch well under it.
DEFAULT_LATE_AFTER_S = 0.010

ENDPOINT_PATHS: dict[Endpoint, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """One run. Times are seconds; `None` means "not set" so that defaults can depend on mode."""

    url: str
    concurrency: int | None = None
    rate: float | None = None
    arrival: ArrivalProcess = "uniform"
    trace: str | None = None
    time_scale: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    max_outstanding: int = DEFAULT_MAX_OUTSTANDING
    stream: bool = False
    model: str = DEFAULT_MODEL
    endpoint: Endpoint = "chat"
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    api_key: SecretStr | None = None
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: Mapping[str, Any] | None = None
    repeat_rate: float = 0.0
    seed: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    drain_timeout_s: float | None = None
    late_after_s: float = DEFAULT_LATE_AFTER_S
    # Where `--trace azure|mooncake` names are looked up; None = `<project>/../shared/data`.
    data_dir: Path | None = None
    # Keep every request's latencies in the result (`samples`): what `levergate report` draws
    # CDFs and histograms from.
    samples: bool = False

    @property
    def mode(self) -> Mode:
        if self.rate is not None:
            return "rate"
        if self.trace is not None and self.concurrency is None:
            return "trace"
        return "closed"

    @property
    def workers(self) -> int:
        return self.concurrency if self.concurrency is not None else DEFAULT_CONCURRENCY

    @property
    def drain_s(self) -> float:
        """How long in-flight requests may finish after sending stops, before being cancelled."""
        return self.drain_timeout_s if self.drain_timeout_s is not None else self.timeout_s

    @property
    def stop_after_s(self) -> float | None:
        """The sending deadline. With neither bound set, a default duration keeps the run finite
        (a trace also ends by itself, so it needs no default)."""
        if self.duration_s is not None:
            return self.duration_s
        if self.requests is None and self.trace is None:
            return DEFAULT_DURATION_S
        return None

    def target_url(self) -> str:
        """`http://host:port` gets `/v1/<endpoint>`; a URL ending in `/v1` gets `/<endpoint>`;
        a URL already naming a path ending in an endpoint's path is used as given."""
        parts = urlsplit(self.url)
        path = parts.path.rstrip("/")
        suffix = ENDPOINT_PATHS[self.endpoint]
        if path.endswith(suffix[3:]):
            return self.url
        if path.endswith("/v1"):
            return self.url.rstrip("/") + suffix[3:]
        return self.url.rstrip("/") + suffix

    def validate(self) -> BenchConfig:
        """Return self, or raise `ConfigError` naming the offending option."""
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"bench: URL must be http(s)://host[:port][/path], got {self.url!r}")
        if self.rate is not None and self.concurrency is not None:
            raise ConfigError(
                "bench: --rate (open loop) and --concurrency (closed) exclude each other"
            )
        _positive("rate", self.rate)
        _positive("concurrency", self.concurrency)
        _positive("requests", self.requests)
        _positive("duration", self.duration_s)
        _positive("time-scale", self.time_scale)
        _positive("max-outstanding", self.max_outstanding)
        _positive("timeout", self.timeout_s)
        _positive("prompt-tokens", self.prompt_tokens)
        _positive("max-tokens", self.max_tokens)
        if self.drain_timeout_s is not None and self.drain_timeout_s < 0:
            raise ConfigError("bench: --drain-timeout must be >= 0")
        if not 0.0 <= self.repeat_rate <= 1.0:
            raise ConfigError("bench: --repeat-rate must be within [0, 1]")
        if self.stream and self.endpoint == "embeddings":
            raise ConfigError("bench: embeddings cannot be streamed")
        return self

    def describe(self) -> dict[str, Any]:
        """The settings worth recording beside the results; never the API key or headers' values."""
        return {
            "url": self.target_url(),
            "mode": self.mode,
            "concurrency": self.workers if self.mode == "closed" else None,
            "rate": self.rate,
            "arrival": self.arrival if self.mode == "rate" else None,
            "trace": self.trace,
            "time_scale": self.time_scale if self.trace is not None else None,
            "requests": self.requests,
            "duration_s": self.stop_after_s,
            "max_outstanding": self.max_outstanding if self.mode != "closed" else None,
            "stream": self.stream,
            "model": self.model,
            "endpoint": self.endpoint,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "repeat_rate": self.repeat_rate,
            "seed": self.seed,
            "timeout_s": self.timeout_s,
            "header_names": sorted(name for name, _ in self.headers),
            "samples": self.samples,
        }


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"bench: --{name} must be > 0, got {value}")
