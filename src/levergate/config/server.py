"""The HTTP server and the request bounds every client-controlled size is held to, metrics, and
background jobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from levergate.config.base import DEFAULT_HOST, DEFAULT_PORT, _Strict

ReadinessMode = Literal["any_model", "every_model", "started"]


class ResponseHeadersSettings(_Strict):
    """Headers that tell a client what its request did (layers/measure/disclose.py), each on by
    default and turned off here. A stream's head leaves at its first token, before its cost is
    known, so cost, savings and a budget net of the request are on whole answers only; a stream
    gets the alias, the attempts and the budget left when it was admitted.

        x-levergate-model                  the alias that answered (a route's or cascade's
                                           choice, a fallback); absent on a cache hit
        x-levergate-attempts, -retries     upstream calls made, and how many were retries
        x-levergate-cost-usd               what it cost (answer + side spends), 8 decimals
        x-levergate-savings-usd            what the levers saved, net (policies/pricing.py)
        x-levergate-budget-remaining-usd   with a gateway key that has a budget: what is left
                                           of the tighter one (daily, monthly)
        x-levergate-tier                   the service tier the provider was asked for
                                           (flex, standard, priority; layers/tiers/): the
                                           client's own or the deadline's choice; absent when
                                           none was asked"""

    model: bool = True  # x-levergate-model
    attempts: bool = True  # x-levergate-attempts and x-levergate-retries
    cost: bool = True  # x-levergate-cost-usd and x-levergate-savings-usd
    budget: bool = True  # x-levergate-budget-remaining-usd
    tier: bool = True  # x-levergate-tier


# What a streamed upload's body may carry besides the file: multipart framing (boundaries,
# part headers, the `purpose` field; batch/files.py bounds each). Added to the body limit, so
# `max_upload_bytes` (and `batch.max_file_bytes`) apply to the file's own bytes: a file of
# exactly 200 MiB was refused, the framing counted against it.
MULTIPART_OVERHEAD_BYTES = 64 * 1024


class LargeRequestSettings(_Strict):
    """Fair admission of large requests (server/large.py, policies/fair_queue.py): a JSON
    request whose declared body is at least `min_bytes` (or that declares none and comes
    chunked) waits for a slot before its body is read, so one tenant's multi-megabyte bodies
    (parsed, hashed, counted, re-encoded and stored on the one event loop, and sent upstream
    whole) cannot take the loop from every other tenant's small requests, which never wait.
    Slots go to the waiting tenant holding fewest, in turn. A slot is held until the handler
    has its answer (a whole answer built, a stream's head), upstream time included: the caps
    bound a tenant's concurrent large requests. Uploads (streamed to disk) are not counted."""

    enabled: bool = True
    # Declared body bytes from which a request is large. A chat of ~4,000 tokens is ~16 KiB.
    min_bytes: int = Field(64 * 1024, ge=1)
    # Large requests holding a slot at once, in all and of one tenant.
    in_flight: int = Field(16, ge=1)
    per_tenant: int = Field(4, ge=1)
    # Large requests of one tenant waiting for a slot; one more is answered 429
    # (`too_many_large_requests`). A waiter holds its connection only: its body is not read.
    waiting_per_tenant: int = Field(64, ge=0)


class ServerSettings(_Strict):
    """The HTTP server `levergate serve` runs (uvicorn with levergate's own protocol limits,
    server/run.py): where it listens, the bounds every client is held to, logging of requests,
    shutdown and readiness."""

    # The address to listen on: loopback by default; `0.0.0.0` for every interface.
    host: str = DEFAULT_HOST
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)  # 0: any free port
    # Body limits per route (server/routes.py): JSON routes read the body whole under
    # `max_body_bytes` (413 beyond); streaming routes (uploads, written to disk in chunks) get
    # `max_upload_bytes`, OpenAI's limit for a batch input file, for the file's bytes (plus
    # `MULTIPART_OVERHEAD_BYTES` of framing).
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_upload_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    # Whole answers larger than this (a 2,048-vector embeddings answer is ~67 MB) go out in
    # chunks of this size, each when the client has read the one before: one write of the
    # whole body copied it into the socket's buffer at once (~0.15 s of event loop per 67 MB)
    # and kept a copy per slow reader.
    file_chunk_bytes: int = Field(256 * 1024, ge=1024)
    # Seconds an in-flight request may take to finish when the server stops; after them a stream
    # ends with a `shutting_down` error event and an unanswered request gets a 503 (server/run.py).
    graceful_shutdown_seconds: float = Field(10.0, ge=0)
    # Seconds between the shutdown signal (SIGTERM, Ctrl-C) and the listener closing, during
    # which requests are still served and /readyz answers 503 `draining`, so a load balancer
    # takes this replica out before it stops accepting (a rolling restart loses nothing). Set
    # it to the balancer's health-check interval times its failure count, plus one interval.
    # A second signal ends it at once. The graceful shutdown follows.
    drain_seconds: float = Field(0.0, ge=0, le=3600)
    # What /readyz asks of the model aliases (layers/traffic/readiness.py): `any_model` can
    # serve (an endpoint of its own or of a fallback not ejected nor failing its health checks),
    # `every_model`, or only that the gateway is `started` and not draining.
    readiness: ReadinessMode = "any_model"
    # One line per answered request (server/access_log.py): client, method, path, status,
    # duration, request id; JSON fields with `log_format: json`.
    access_log: bool = False
    # x-levergate-* headers on each answer saying what the request did and cost.
    response_headers: ResponseHeadersSettings = Field(default_factory=ResponseHeadersSettings)
    # A client disconnect cancels a request once it has run this long (server/http_cycle.py; under
    # another ASGI server, a watcher starts then: server/asgi.py): cheaper than a watcher per
    # request, and quick enough to stop paying for abandoned calls.
    # Measured: at 50 ms the watcher started right as typical answers arrived and added ~0.7 ms.
    disconnect_watch_after_seconds: float = Field(1.0, ge=0)
    # CPUs `levergate serve` is pinned to (server/run.py: tune_process); None leaves it to the
    # scheduler. On a small machine shared with an engine, give the gateway a core of its own.
    cpus: list[int] | None = None
    # Worker processes serving one port (`levergate serve --workers N`, server/workers.py): a
    # supervising parent holds the port and restarts a worker that dies; the kernel spreads
    # connections over the workers (SO_REUSEPORT). They behave as one gateway: state that
    # would live in memory (limits, the exact cache, budgets, stored responses) moves to SQLite
    # files on this machine unless `stores` names Redis, and /metrics adds every worker's
    # counters up. At most 64 and 4 per core (more only adds switching).
    workers: int = Field(1, ge=1, le=64)
    # Garbage-collector tuning for `levergate serve` (server/run.py: tune_process): freeze what
    # start-up built, and run young collections every this many allocations (0: leave as is).
    gc_freeze: bool = True
    gc_gen0_threshold: int = Field(50_000, ge=0)
    # `levergate serve` gives freed memory back to the system (glibc's malloc_trim) when
    # malloc holds this much more free than it did after the last trim, looking every so many
    # seconds (server/memory.py): after a burst of large requests it stayed at 1,660 MiB idle;
    # with this, 520 (benchmarks/results/memory_highwater.md). 0: never.
    memory_trim_above_mib: int = Field(64, ge=0)
    memory_trim_every_seconds: float = Field(5.0, gt=0)
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
    # Open connections from one peer address; one beyond it is answered 503
    # (`too_many_connections_from_peer`) once its head arrives, and is shed first while it has
    # sent nothing (server/peers.py). 0: no per-peer limit. Behind a load balancer every client
    # is the balancer's address: set 0 (or above the balancer's pool) and limit per client
    # there. One peer re-opening 4,300 idle sockets left a normal client 1 answer in 20.
    max_connections_per_peer: int = Field(1024, ge=0)
    # A connection arriving at the cap closes the oldest one that has sent no byte for at least
    # this long (a client that just connected is about to send its head) and takes its place.
    shed_idle_after_seconds: float = Field(1.0, ge=0)
    # The warning that connections were refused is logged at most once per this many seconds,
    # with the count refused since the last one: a flood does not become a flood of log lines.
    overload_log_seconds: float = Field(10.0, gt=0)
    # Slots for large request bodies, per tenant (server/large.py).
    large_requests: LargeRequestSettings = Field(default_factory=LargeRequestSettings)


class RequestLimitsSettings(_Strict):
    """Bounds on what one client request may ask for, checked at the edge (protocol/openai/body.py
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


class MetricsSettings(_Strict):
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


class BackgroundSettings(_Strict):
    """Restarting a background job (health checks, the shared semantic index follower) that
    crashed: waits double from `restart_base_seconds` up to `restart_cap_seconds`, so a job
    that fails at every start (its Redis is down) costs one log line and one try per cap."""

    restart_base_seconds: float = Field(1.0, gt=0)
    restart_cap_seconds: float = Field(60.0, gt=0)
