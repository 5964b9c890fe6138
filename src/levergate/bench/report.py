"""`BenchResult`: the numbers of one run, as JSON for machines and a markdown table for people.

Rates, defined once (after vegeta):
- `target_rps`: the configured rate, or for a trace the mean rate of its scheduled arrivals
  ((n - 1) / span); none for a closed loop.
- `achieved_rps`: how fast requests were actually launched, (sent - 1) / (last send - first
  send). Below target means the client or the `max_outstanding` cap held requests back.
- `throughput_rps`: successful completions per second of the whole run, drain included.

Latencies are milliseconds. `total_ms` and `ttft_ms` count from each request's intended send
time (open loop) or its send time (closed loop); `service_ms` always from the send time, so the
gap between `total_ms` and `service_ms` is the queueing the schedule saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson

from levergate.bench.config import BenchConfig
from levergate.bench.recorder import Recorder
from levergate.bench.stats import mean, summarize

PERCENTILE_METHOD = "exact: all samples kept, linear interpolation between closest ranks (type 7)"
# Above this share of one core, the client itself may be what limits the rate.
CLIENT_SATURATED = 0.85


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunTotals:
    """Run-level facts the runner knows and the recorder does not."""

    start: float
    end: float
    cpu_s: float
    planned: int
    last_offset_s: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    config: dict[str, Any]
    nonce: str
    mode: str
    target_rps: float | None
    achieved_rps: float | None
    throughput_rps: float | None
    elapsed_s: float
    planned: int
    sent: int
    completed: int
    ok: int
    errors: dict[str, int]
    late: int
    dropped: int
    incomplete: int
    repeats: int
    ttft_ms: dict[str, float]
    total_ms: dict[str, float]
    service_ms: dict[str, float]
    itl_ms: dict[str, float]
    send_lag_ms: dict[str, float]
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    mean_cached_tokens: float | None
    output_tokens_per_s: float | None
    client_cpu_s: float
    client_cpu_ms_per_request: float | None
    client_cpu_utilization: float | None
    percentile_method: str = PERCENTILE_METHOD
    warnings: tuple[str, ...] = ()
    # Every sample in milliseconds, by series (`--samples`): total_ms, ttft_ms, itl_ms.
    samples: dict[str, list[float]] | None = None

    @classmethod
    def build(
        cls, *, config: BenchConfig, recorder: Recorder, totals: RunTotals, nonce: str
    ) -> BenchResult:
        elapsed = max(totals.end - totals.start, 0.0)
        output = mean(recorder.output_tokens)
        done = recorder.done
        cpu_share = totals.cpu_s / elapsed if elapsed > 0 else None
        result = cls(
            config=config.describe(),
            nonce=nonce,
            mode=config.mode,
            target_rps=_target_rps(config, totals),
            achieved_rps=_launch_rate(recorder),
            throughput_rps=recorder.ok / elapsed if elapsed > 0 else None,
            elapsed_s=elapsed,
            planned=totals.planned,
            sent=recorder.sent,
            completed=done,
            ok=recorder.ok,
            errors=dict(sorted(recorder.errors.items())),
            late=recorder.late,
            dropped=recorder.dropped,
            incomplete=recorder.sent - done,
            repeats=recorder.repeats,
            ttft_ms=summarize(recorder.ttft),
            total_ms=summarize(recorder.total),
            service_ms=summarize(recorder.service),
            itl_ms=summarize(recorder.itl),
            send_lag_ms=summarize(recorder.send_lag),
            mean_prompt_tokens=mean(recorder.prompt_tokens),
            mean_output_tokens=output,
            mean_cached_tokens=mean(recorder.cached_tokens),
            output_tokens_per_s=(
                sum(recorder.output_tokens) / elapsed if output is not None and elapsed else None
            ),
            client_cpu_s=totals.cpu_s,
            client_cpu_ms_per_request=totals.cpu_s * 1000 / done if done else None,
            client_cpu_utilization=cpu_share,
            samples=_samples(recorder) if config.samples else None,
        )
        return dataclasses.replace(result, warnings=_warnings(result, cpu_share))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["warnings"] = list(self.warnings)
        data["error_count"] = sum(self.errors.values())
        return data

    def to_json(self) -> str:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2).decode()

    def to_markdown(self) -> str:
        """One-row table plus the error breakdown and warnings; `markdown_table` compares runs."""
        lines = [markdown_table([self])]
        if self.errors:
            kinds = ", ".join(f"{kind}: {count}" for kind, count in self.errors.items())
            lines.append(f"\nErrors by kind: {kinds}")
        lines.extend(f"\n> warning: {warning}" for warning in self.warnings)
        return "\n".join(lines) + "\n"


_COLUMNS = (
    "mode",
    "target rps",
    "achieved rps",
    "ok",
    "errors",
    "late",
    "dropped",
    "TTFT p50",
    "TTFT p95",
    "TTFT p99",
    "total p50",
    "total p95",
    "total p99",
    "ITL p50",
    "ITL p99",
    "mean out tok",
    "client cpu ms/req",
)


def markdown_table(results: Sequence[BenchResult]) -> str:
    """Runs as rows, latencies in milliseconds; `-` where a run has no such sample."""
    header = "| " + " | ".join(_COLUMNS) + " |"
    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(_COLUMNS))) + "|"
    rows = [header, rule]
    for result in results:
        cells = [
            _mode_label(result),
            _number(result.target_rps),
            _number(result.achieved_rps),
            str(result.ok),
            str(sum(result.errors.values())),
            str(result.late),
            str(result.dropped),
            *(_number(result.ttft_ms.get(q)) for q in ("p50", "p95", "p99")),
            *(_number(result.total_ms.get(q)) for q in ("p50", "p95", "p99")),
            *(_number(result.itl_ms.get(q)) for q in ("p50", "p99")),
            _number(result.mean_output_tokens),
            _number(result.client_cpu_ms_per_request, digits=3),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _mode_label(result: BenchResult) -> str:
    if result.mode == "closed":
        return f"closed c={result.config.get('concurrency')}"
    if result.mode == "trace":
        return f"trace {result.config.get('trace')} x{result.config.get('time_scale')}"
    return f"open {result.config.get('arrival')}"


def _number(value: float | None, *, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _target_rps(config: BenchConfig, totals: RunTotals) -> float | None:
    if config.mode == "rate":
        return config.rate
    if config.mode == "trace" and totals.planned > 1 and totals.last_offset_s > 0:
        return (totals.planned - 1) / totals.last_offset_s
    return None


def _launch_rate(recorder: Recorder) -> float | None:
    first, last = recorder.first_sent_at, recorder.last_sent_at
    if recorder.sent < 2 or first is None or last is None or last <= first:
        return None
    return (recorder.sent - 1) / (last - first)


def _samples(recorder: Recorder) -> dict[str, list[float]]:
    """Every latency sample, milliseconds to the microsecond, in completion order."""
    series = {"total_ms": recorder.total, "ttft_ms": recorder.ttft, "itl_ms": recorder.itl}
    return {name: [round(v * 1000, 3) for v in values] for name, values in series.items()}


def _warnings(result: BenchResult, cpu_share: float | None) -> tuple[str, ...]:
    found: list[str] = []
    if cpu_share is not None and cpu_share > CLIENT_SATURATED:
        found.append(
            f"client CPU at {cpu_share:.0%} of one core: the load generator may be the bottleneck"
        )
    if result.late:
        found.append(f"{result.late} requests launched late (queueing shows in total_ms)")
    if result.dropped:
        found.append(f"{result.dropped} scheduled requests never launched (max_outstanding full)")
    if result.incomplete:
        found.append(f"{result.incomplete} requests still in flight at the stop were cancelled")
    return tuple(found)
