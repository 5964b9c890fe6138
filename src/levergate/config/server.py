"""The HTTP server and the request bounds every client-controlled size is held to, metrics, and
background jobs."""

from __future__ import annotations

from pydantic import Field, SecretStr

from levergate.config.base import DEFAULT_HOST, DEFAULT_PORT, _Strict


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
    # Content blocks of an Anthropic Messages request, counted over every message, the system
    # prompt and tool results (ours: a 2,048-message agent history of a few blocks each fits;
    # the translation's work is linear in it).
    max_content_blocks: int = Field(20_000, ge=1)
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


class Background(_Strict):
    """Restarting a background job (health checks, the shared semantic index follower) that
    crashed: waits double from `restart_base_seconds` up to `restart_cap_seconds`, so a job
    that fails at every start (its Redis is down) costs one log line and one try per cap."""

    restart_base_seconds: float = Field(1.0, gt=0)
    restart_cap_seconds: float = Field(60.0, gt=0)
