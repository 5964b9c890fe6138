"""Where does a traced request's CPU go? Every thread of an in-process run (`levergate.bench.calls`'
path: the httpx client over `GatewayTransport`, an upstream answering from memory) is profiled
with cProfile, `otel.endpoint` off and on (spans exported to a receiver in another process,
which answers 200 and drops them), from the gateway's start to its close (which exports what is
queued). Each function's own time (tottime) is put in an area by its module: the tracer's code
(on the event loop or in other threads), the OpenTelemetry SDK, protobuf, the HTTP client, the
rest of the gateway. Function calls per request (by area too) are the deterministic part: they
do not move with the machine's load, while the profiled times do (and cProfile inflates them,
more for many small Python functions than for C).

    python benchmarks/otel_profile.py [--requests 2000] [--src OTHER_TREE/src --src-name NAME]
    python benchmarks/otel_profile.py --smoke

`--src`: profile another tree's code too (the code before a change), in the same run.
Writes benchmarks/results/otel_profile.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp
from otel_ab import receiving

HERE = Path(__file__).resolve().parent
AREAS = (  # (area, a module path fragment), first match wins
    ("levergate otel", "levergate/otel/"),
    ("opentelemetry SDK/API", "opentelemetry/"),
    ("protobuf", "google/protobuf"),
    ("HTTP client (requests, urllib3, aiohttp)", "requests/"),
    ("HTTP client (requests, urllib3, aiohttp)", "urllib3/"),
    ("HTTP client (requests, urllib3, aiohttp)", "aiohttp/"),
    ("levergate (the rest)", "levergate/"),
)


def area(func: tuple[str, int, str]) -> str:
    path, _, name = func
    if path == "~":  # a C function: by its name (`<method 'SerializeToString' ...>`)
        for label, fragment in (("protobuf", "google._upb"), ("protobuf", "Serialize")):
            if fragment in name:
                return label
        return "C builtins"
    for label, fragment in AREAS:
        if fragment in path:
            return label
    return "other Python (httpx, asyncio, stdlib)"


async def workload(requests: int, *, stream: bool, endpoint: str | None) -> None:
    from levergate.app import extensions_for
    from levergate.bench.calls import BASE_URL, CannedUpstream, _body, _in_process
    from levergate.config import Settings
    from levergate.gateway import Gateway
    from levergate.pipeline import Deps

    canned = CannedUpstream()
    values: dict[str, Any] = {"prompt_cache": {"lint": {"enabled": False}}}
    if endpoint:
        values["otel"] = {"endpoint": endpoint}
    settings = Settings.for_upstream(BASE_URL, **values)
    gateway = Gateway(settings, deps=Deps(http_client=lambda _: canned),
                      extensions=extensions_for(settings))  # fmt: skip
    async with gateway, _in_process(gateway) as one:
        for index in range(requests):
            await one(_body(index, stream))
            # A turn of the loop, as a server's socket gives it: the upstream answering from
            # memory never suspends the task, and the exporter's job would never run.
            await asyncio.sleep(0)


def child(args: argparse.Namespace) -> None:
    """One profiled run; prints its figures as JSON."""
    stream = args.kind == "stream"
    asyncio.run(workload(200, stream=stream, endpoint=args.endpoint))  # imports, caches
    started = time.process_time()
    asyncio.run(workload(args.requests, stream=stream, endpoint=args.endpoint))
    cpu_us = (time.process_time() - started) / args.requests * 1e6
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def profile_thread(*_: Any) -> None:
        sys.setprofile(None)
        found = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(found)
        found.enable()

    threading.setprofile(profile_thread)
    main = cProfile.Profile(time.thread_time)  # CPU time: a thread waiting costs nothing
    main.enable()
    asyncio.run(workload(args.requests, stream=stream, endpoint=args.endpoint))
    main.disable()
    threading.setprofile(None)  # type: ignore[arg-type]
    by_area: dict[str, dict[str, float]] = defaultdict(lambda: {"us": 0.0, "calls": 0.0})
    for where, profile in (("loop", main), *(("thread", p) for p in profiles)):
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        for func, (_, calls, tottime, _, _) in stats.items():
            label = area(func) + (" (other threads)" if where == "thread" else "")
            by_area[label]["us"] += tottime / args.requests * 1e6
            by_area[label]["calls"] += calls / args.requests
    print(json.dumps({"cpu_us": cpu_us, "areas": by_area}))


def run_child(src: Path, kind: str, requests: int, endpoint: str | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--kind", kind, "--requests", str(requests)]
    if endpoint:
        argv += ["--endpoint", endpoint]
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--src-name", default="before")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--kind", default="whole")
    parser.add_argument("--endpoint", default=None)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    out = Output.of(args)
    if args.smoke:
        args.requests = 100
    trees = {"this tree": HERE.parent / "src"}
    if args.src:
        trees = {args.src_name: args.src.resolve(), **trees}
    runs: dict[str, Any] = {}
    with receiving() as receiver:
        for tree, src in trees.items():
            for kind in ("whole", "stream"):
                for side, endpoint in (("off", None), ("on", receiver)):
                    name = f"{tree}, {kind}, otel {side}"
                    runs[name] = run_child(src, kind, args.requests, endpoint)
                    print(name, json.dumps(runs[name]["cpu_us"]), flush=True)
    report(runs, args, out)


def report(runs: dict[str, Any], args: argparse.Namespace, out: Output) -> None:
    data: dict[str, Any] = {**stamp(), "requests": args.requests, "runs": runs}
    lines = [
        f"# Where a traced request's CPU goes ({data['date']}, {data['machine']})", "",
        (f"`benchmarks/otel_profile.py --requests {args.requests}"
         f"{' --src ' + args.src_name if args.src else ''}`: every thread of an in-process run "
        "(httpx client over `GatewayTransport`, an upstream answering from memory) profiled by "
        "cProfile (each thread's CPU time) from the gateway's start to its close, "
        "`otel.endpoint` off and on (every request traced, exported to a receiver in another "
        "process). Per request: CPU of an unprofiled run (noisy on this shared machine), then "
        "each area's own time under cProfile (inflated by the profiler) and its function calls "
        "(deterministic)."), "",
    ]  # fmt: skip
    names = list(runs)
    areas = sorted({a for r in runs.values() for a in r["areas"]})
    lines.append("| area | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    lines.append("| CPU us/request, unprofiled | "
                 + " | ".join(f"{runs[n]['cpu_us']:.0f}" for n in names) + " |")  # fmt: skip
    for label in areas:
        cells = []
        for n in names:
            found = runs[n]["areas"].get(label)
            cells.append(f"{found['us']:.0f} us, {found['calls']:.0f} calls" if found else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    totals = [sum(a["calls"] for a in runs[n]["areas"].values()) for n in names]
    lines.append("| all calls | " + " | ".join(f"{t:.0f}" for t in totals) + " |")
    out.write("otel_profile", data, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
