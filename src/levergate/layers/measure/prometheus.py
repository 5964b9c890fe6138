"""The Prometheus sink: today's request metrics, from each `RequestRecord`.

Histograms carry route, model, upstream and feature labels so p50/p95/p99 follow for each. The
model (behind a `*` route) and the feature come from clients, so the number of series is
bounded as a whole (`metrics.max_label_sets`): every distinct (route, model, upstream, feature)
combination takes a slot, and once they are all taken a new combination is recorded under
(route, "other", upstream, "other"). A per-label bound alone does not hold: 100 features times
100 models is already 10,000 combinations, and 20,000 crafted requests once made `/metrics`
57 MB. A request refused by authentication takes no slot at all (its model and feature are
recorded as ""): only callers the gateway knows can spend the budget.
"""

from __future__ import annotations

import asyncio
import os
import platform
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from levergate.config import LedgerSettings, MetricsSettings
from levergate.core.tokenizer import TokenSource
from levergate.layers.measure import hot
from levergate.layers.measure.labels import OTHER, LabelValues
from levergate.layers.measure.ledger import LedgerMetrics
from levergate.layers.measure.record import RequestRecord
from levergate.version import __version__

Labels = tuple[str, str, str, str]
LABELS = ("route", "model", "upstream", "feature")
# Set before prometheus_client is imported, it writes every value to files in that folder.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_REPORTED = TokenSource.REPORTED


class Telemetry:
    """The Prometheus metrics of one gateway, in its own registry (no global state)."""

    def __init__(self, settings: MetricsSettings, *, ledger: LedgerSettings | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        process_metrics(self.registry)
        # The cost ledger's dollars by lever, model, tenant and feature (None: `ledger` off).
        ledger = LedgerSettings() if ledger is None else ledger
        self.ledger = LedgerMetrics(ledger, self.registry) if ledger.enabled else None
        self._timings(settings)
        self._usage()
        self.in_flight = Gauge(
            "levergate_in_flight", "Requests being served.", registry=self.registry
        )
        # What Measure adds 1 and -1 to around each request.
        self.serving = hot.gauge(self.in_flight)
        self.bounded = LabelValues(("feature", "model"), max_values=settings.max_label_values)
        self._max_sets = settings.max_label_sets
        self._sets: set[Labels] = set()
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}
        # Each label set's series, and those of authenticated requests by their labels as
        # they came, once admitted as they are (both bounded by the series budget).
        self._series: dict[Labels, Series] = {}
        self._admitted: dict[Labels, Series] = {}
        self._rendering = asyncio.Lock()
        self._exposed = self.registry
        # Every Telemetry a worker builds, the reloaded ones included, exposes all workers.
        if shared_dir := os.environ.get(MULTIPROCESS_DIR):
            self.aggregate(shared_dir)

    def _timings(self, settings: MetricsSettings) -> None:
        """Requests by outcome and their durations."""
        labels, buckets, reg = LABELS, settings.latency_buckets, self.registry
        self.requests = Counter(
            "levergate_requests", "Requests by outcome.", (*labels, "outcome"), registry=reg
        )
        self.total = Histogram(
            "levergate_request_seconds",
            "Time from arrival to the last byte of the answer.",
            (*labels, "outcome"),
            buckets=buckets,
            registry=reg,
        )
        self.ttft = Histogram(
            "levergate_ttft_seconds",
            "Time from arrival to the first generated token of a stream.",
            labels,
            buckets=buckets,
            registry=reg,
        )
        self.itl = Histogram(
            "levergate_inter_token_seconds",
            "Mean gap between generated chunks of a stream, one sample per stream.",
            labels,
            buckets=buckets,
            registry=reg,
        )
        self.overhead = Histogram(
            "levergate_overhead_seconds",
            "Gateway time per request: total minus upstream wait (and client writes for streams).",
            ("route",),
            buckets=settings.overhead_buckets,
            registry=reg,
        )

    def _usage(self) -> None:
        """Tokens and dollars, and the records the sinks could not take."""
        reg = self.registry
        self.tokens = Counter(
            "levergate_tokens",
            "Tokens by kind: input (cached and cache writes included, OpenAI convention), "
            "output, cached (prompt-cache reads), cache_write (prompt-cache writes).",
            ("model", "upstream", "feature", "kind"),
            registry=reg,
        )
        self.cost = Counter(
            "levergate_cost_usd",
            "What client requests cost, by the model the client asked for (model), upstream and "
            "feature: the answer at the price of the model that answered plus its side spends "
            "(a cascade's rejected attempts, summaries, judges). The per-request view, beside "
            "levergate_requests_total. The same dollars by tenant and by kind of spend are in "
            "levergate_spend_usd_total, which also counts the gateway's own shadow calls "
            "(kind=shadow), charged to no request and not in this counter.",
            ("model", "upstream", "feature"),
            registry=reg,
        )
        self.unreported = Counter(
            "levergate_unreported_output_tokens",
            "Output tokens the upstream did not report, counted here (how: counted with the "
            "model's tokenizer, estimated from length). Included in levergate_tokens_total.",
            ("model", "upstream", "feature", "how"),
            registry=reg,
        )
        self.sink_errors = Counter(
            "levergate_sink_errors",
            "Finished-request records a sink failed to take, or (sink=record) that could not be "
            "built; each is logged once.",
            ("sink",),
            registry=reg,
        )

    def aggregate(self, path: str) -> None:
        """Expose every worker's series, added up, instead of this process's own: the worker
        processes of `levergate serve --workers N` (server/workers.py) or of any other
        multi-process host, whose prometheus_client was imported with
        `PROMETHEUS_MULTIPROC_DIR=path` and so writes its values to files there
        (prometheus_client's multiprocess mode). Counters and histograms are summed over
        the workers, dead ones included, so a total is every request served on the port;
        gauges carry a `pid` label. The process collectors (`process_*`, `python_gc_*`) have no
        multiprocess form and are left out, as prometheus_client's multiprocess mode does."""
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        Info(
            "levergate_build", "The levergate package serving, and its Python.", registry=registry
        ).info({"version": __version__, "python": platform.python_version()})
        self._exposed = registry

    async def exposition(self) -> bytes:
        """The `/metrics` text, written in a worker thread, one scrape at a time. At the series
        cap it is ~1.4 MB of text: written on the event loop it held every request up to
        0.35 s per scrape (issue 20). prometheus_client's metrics take their own locks to be
        read from another thread, and nothing here reads loop-owned state while collecting."""
        async with self._rendering:
            return await asyncio.to_thread(generate_latest, self._exposed)

    def labels(self, *, route: str, model: str, upstream: str, feature: str) -> Labels:
        """The label set a request is recorded under, within the series budget."""
        wanted = (route, self.bounded("model", model), upstream, self.bounded("feature", feature))
        if wanted in self._sets:
            return wanted
        if len(self._sets) < self._max_sets:
            self._sets.add(wanted)
            return wanted
        return (route, OTHER, upstream, OTHER)

    def series(self, *, route: str, model: str, upstream: str, feature: str) -> Series:
        """The series of an authenticated request's labels (`labels`): one dict look-up once
        they were admitted as they are (at most `max_label_sets` of them are kept for it)."""
        raw = (route, model, upstream, feature)
        found = self._admitted.get(raw)
        if found is not None:
            return found
        labels = self.labels(route=route, model=model, upstream=upstream, feature=feature)
        found = self.series_of(labels)
        if labels == raw:
            self._admitted[raw] = found
        return found

    def series_of(self, labels: Labels) -> Series:
        """The series of a label set already within the budget."""
        found = self._series.get(labels)
        if found is None:
            found = self._series[labels] = Series(self, labels)
        return found

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, memoised: the lookup is most of the cost of an update."""
        key = (metric._name, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


class Series:
    """What one label set's requests update (`layers.measure.hot`: an addition each). Each child
    is made on first use, as before: a child exists in /metrics from its first `labels()` on
    (a whole answer's labels have no TTFT series)."""

    __slots__ = ("_cost", "_io", "_itl", "_labels", "_outcomes", "_t", "_tokens", "_ttft",
                 "_unreported", "overhead")  # fmt: skip

    def __init__(self, telemetry: Telemetry, labels: Labels) -> None:
        self._t = telemetry
        self._labels = labels
        self.overhead = hot.histogram(telemetry.child(telemetry.overhead, labels[0]))
        self._outcomes: dict[str, tuple[hot.Adds, hot.Observes]] = {}
        self._tokens: dict[str, hot.Adds] = {}
        self._unreported: dict[str, hot.Adds] = {}
        self._ttft: hot.Observes | None = None
        self._itl: hot.Observes | None = None
        self._cost: hot.Adds | None = None
        self._io: tuple[hot.Adds, hot.Adds] | None = None

    def outcome(self, outcome: str) -> tuple[hot.Adds, hot.Observes]:
        """The request counter and the duration histogram of `outcome`."""
        found = self._outcomes.get(outcome)
        if found is None:
            t, labels = self._t, self._labels
            found = self._outcomes[outcome] = (
                hot.counter(t.child(t.requests, *labels, outcome)),
                hot.histogram(t.child(t.total, *labels, outcome)),
            )
        return found

    def ttft(self) -> hot.Observes:
        if self._ttft is None:
            self._ttft = hot.histogram(self._t.child(self._t.ttft, *self._labels))
        return self._ttft

    def itl(self) -> hot.Observes:
        if self._itl is None:
            self._itl = hot.histogram(self._t.child(self._t.itl, *self._labels))
        return self._itl

    def cost(self) -> hot.Adds:
        if self._cost is None:
            _, model, upstream, feature = self._labels
            self._cost = hot.counter(self._t.child(self._t.cost, model, upstream, feature))
        return self._cost

    def tokens(self, kind: str) -> hot.Adds:
        return self._by_model(self._tokens, self._t.tokens, kind)

    def io_tokens(self) -> tuple[hot.Adds, hot.Adds]:
        """The input and the output token counters, which every answered request adds to:
        kept together, one call a request instead of two look-ups."""
        found = self._io
        if found is None:
            found = self._io = (self.tokens("input"), self.tokens("output"))
        return found

    def unreported(self, how: str) -> hot.Adds:
        return self._by_model(self._unreported, self._t.unreported, how)

    def _by_model(self, made: dict[str, hot.Adds], metric: Counter, last: str) -> hot.Adds:
        """The counter of `metric` for this series' model, upstream and feature and `last`,
        made once into `made`."""
        found = made.get(last)
        if found is None:
            _, model, upstream, feature = self._labels
            found = made[last] = hot.counter(self._t.child(metric, model, upstream, feature, last))
        return found


def process_metrics(registry: CollectorRegistry) -> None:
    """The process's own series in the gateway's registry: memory (RSS), CPU seconds, open
    descriptors and their limit, start time (`process_*`, Linux only), garbage collections
    (`python_gc_*`), the Python build (`python_info`) and `levergate_build_info{version}`.
    Each is read when /metrics is scraped, never on a request."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Info(
        "levergate_build", "The levergate package serving, and its Python.", registry=registry
    ).info({"version": __version__, "python": platform.python_version()})


class PrometheusSink:
    """`Sink`: one finished request into the counters and histograms of `Telemetry`."""

    name = "prometheus"

    def __init__(self, telemetry: Telemetry) -> None:
        self._t = telemetry

    def emit(self, record: RequestRecord) -> None:
        # The record, its timings and its tokens unpacked once: a `NamedTuple` field read by
        # name is an unspecialised attribute look-up on CPython 3.11 (~100 instructions), and
        # this made ~30 of them a request (issue 22).
        _, timings, tokens, cost, kind, model, feature, result, _, _, _, _, tenant, upstream = (
            record[:14]
        )
        total, _, overhead, ttft, inter_token = timings
        uncached, cached, written, output, source, _ = tokens
        t = self._t
        # `Telemetry.series` and `Series.outcome` looked up here first (two calls a request
        # fewer); the methods decide, and remember, what is not found.
        if tenant is not None:
            series = t._admitted.get((kind, model, upstream, feature))
            if series is None:
                series = t.series(route=kind, model=model, upstream=upstream, feature=feature)
        else:
            series = t.series_of((kind, "", upstream, ""))
        pair = series._outcomes.get(result)
        requests, durations = pair if pair is not None else series.outcome(result)
        requests.inc(1)
        durations.observe(total)
        series.overhead.observe(overhead)
        if ttft is not None:
            series.ttft().observe(ttft)
        if inter_token is not None:
            series.itl().observe(inter_token)
        prompt = uncached + cached + written  # `Tokens.input`
        if prompt or output:
            added_in, added_out = series.io_tokens()
            added_in.inc(prompt)
            added_out.inc(output)
            if cached:
                series.tokens("cached").inc(cached)
            if written:
                series.tokens("cache_write").inc(written)
            if output and source is not _REPORTED:
                series.unreported(source.value).inc(output)
        if cost:
            series.cost().inc(cost)
