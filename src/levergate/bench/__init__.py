"""`levergate bench`: an honest load generator for any OpenAI-compatible URL.

Closed loop (`concurrency` workers) or open loop at a fixed or trace-driven arrival rate,
free of coordinated omission; exact percentiles; JSON and markdown reports. Usage::

    from levergate.bench import BenchConfig, run_bench

    result = await run_bench(BenchConfig(url="http://127.0.0.1:8080", rate=200, duration_s=30))
    print(result.to_markdown())
"""

from __future__ import annotations

from levergate.bench.config import BenchConfig
from levergate.bench.recorder import Outcome, Sender, Snapshot
from levergate.bench.report import BenchResult, markdown_table
from levergate.bench.runner import run_bench
from levergate.bench.traces import TraceRecord, load_trace, read_trace, resolve_trace

__all__ = [
    "BenchConfig",
    "BenchResult",
    "Outcome",
    "Sender",
    "Snapshot",
    "TraceRecord",
    "load_trace",
    "markdown_table",
    "read_trace",
    "resolve_trace",
    "run_bench",
]
