"""Where a request's time goes on the hot path (issue 22, item 1): the gateway's paths
(`levergate.bench.calls`: distinct chat requests in-process through `GatewayTransport` and over
HTTP on one loopback keep-alive connection, an in-memory upstream, no other process), whole and
streamed, for a few configurations, two ways:

- calls per request by module, counted (deterministic: the CI guard's measure) and only those
  made with a gateway frame on the stack, so the client's own work is left out;
- CPU by module under cProfile: self time (`tottime`) summed by the module the function is in,
  as a share of the run, which a loaded machine scales but does not reorder much.

    .venv/bin/python benchmarks/hotpath_profile.py [--requests 2000] [--smoke]

Writes benchmarks/results/hotpath_profile.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import pstats
from collections import Counter
from typing import Any

from harness import Output, add_output_options, stamp

from levergate.bench.calls import Way, calls_per_request, module_of, serve_requests

CONFIGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "exact cache off": {"cache": {"enabled": False}},
    "trim on (count)": {"trim": {"models": {"*": {"budget": 100_000}}}},
}
TOP = 12  # modules shown per row
WAYS: tuple[Way, ...] = ("inprocess", "http")


def profile(values: dict[str, Any], *, stream: bool, way: Way, requests: int) -> dict[str, float]:
    """Share of the profiled run's self time by module, largest first."""
    profiler = cProfile.Profile()
    asyncio.run(serve_requests(profiler, stream=stream, requests=requests, warmup=50, way=way,
                               **values))  # fmt: skip
    stats = pstats.Stats(profiler)
    by_module: Counter[str] = Counter()
    for (path, _, _), row in stats.stats.items():  # type: ignore[attr-defined]
        # cProfile files C functions under "~"; a row is (calls, primitive calls, tottime, ...).
        by_module["C builtins" if path == "~" else module_of(path)] += row[2]
    total = sum(by_module.values()) or 1.0
    return {module: seconds / total for module, seconds in by_module.most_common(TOP)}


def run(requests: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for way, name, stream in itertools.product(WAYS, CONFIGS, (False, True)):
        values = CONFIGS[name]
        counted = asyncio.run(calls_per_request(stream=stream, requests=min(40, requests),
                                                way=way, **values))  # fmt: skip
        rows[f"{way}: {name}, {'stream' if stream else 'whole'}"] = {
            "gateway_calls": counted.gateway_per_request,
            "all_calls": counted.per_request,
            "calls_by_module": {m: n / counted.requests
                                for m, n in counted.by_module.most_common(TOP)},
            "cpu_share_by_module": profile(values, stream=stream, way=way, requests=requests),
        }  # fmt: skip
    return rows


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Where a request goes on the hot path ({data['date']}, {data['machine']})", "",
        (f"In-process and over HTTP (`levergate.bench.calls`), {data['requests']} distinct chat "
         "requests per row under cProfile; calls counted over 40 requests, only those under a "
         "gateway frame. CPU share: self time by module, of the whole profiled run (client "
         "included)."), "",
        ("| configuration | gateway calls / request | all calls / request | most calls "
         "(per request) | most CPU (share) |"), "|---|---:|---:|---|---|",
    ]  # fmt: skip
    for name, row in data["rows"].items():
        calls = ", ".join(f"{m} {n:.0f}" for m, n in list(row["calls_by_module"].items())[:6])
        cpu = ", ".join(f"{m} {s:.0%}" for m, s in list(row["cpu_share_by_module"].items())[:6])
        lines.append(f"| {name} | {row['gateway_calls']:.0f} | {row['all_calls']:.0f} | "
                     f"{calls} | {cpu} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.requests = 20
    data = {**stamp(), "requests": args.requests, "rows": run(args.requests)}
    out.write("hotpath_profile", data, markdown(data))


if __name__ == "__main__":
    main()
