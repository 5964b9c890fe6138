"""levergate's default proxy path against a bare relay, side by side in one run (issue 22).

Three targets behind one `levergate sim` (0 ms upstream latency), each its own process:
direct (the simulator itself), a bare relay (`bare_relay.py`: uvicorn + uvloop + httptools
relaying with aiohttp, nothing else) and `levergate serve --upstream URL` with its defaults.
In alternating rounds (direct, relay, levergate, then again) it measures

- requests/s with wrk (a C load generator) at 16 and 64 connections, non-streamed chat
  requests (no temperature: the exact cache lets them through), and the relay's and the
  gateway's CPU per request from /proc;
- at concurrency 1, the p50 round trip of a plain Python socket client (one keep-alive
  connection, distinct requests), in two placements: client and servers pinned to one CPU
  (`same`), and to two (`split`). On this 2-vCPU VM a wake-up across CPUs costs tens of
  microseconds in each direction (the same request: direct 0.045 ms on one CPU, 0.127 ms across
  two), so a round trip left to the scheduler measured where it put the processes, not the
  gateway: the direct round trip came out 0.039 ms in one run and 0.117 ms in the next;
- an exact-cache hit (temperature 0, the same request again) through levergate (and through the
  baseline, when there is one) against the same client's round trip straight to the simulator.

With `--observability` (and in the smoke run) a fourth target, "levergate log+otel", is
levergate with the request log (SQLite in a temporary folder) and OpenTelemetry (every request
traced, exported to a receiver in another process that drops the spans) on: issue 22's bound
for it is <= 1.1x the CPU per request of levergate with both off, in this harness. The gateways
live for the whole run (`log_ab.py` and `trees_ab.py --proxy` start theirs anew each round).

Targets (issue 22): levergate >= 0.95x the relay's requests/s at c=16 and c=64, <= 1.1x its CPU
per request, c=1 p50 within +0.05 ms of the relay's, a cache hit <= 1.5x the direct round trip.
The machine is shared (two cores, other sessions' tests): every figure is a ratio inside one
run, and the load average is printed with it.

    .venv/bin/python benchmarks/relay_side_by_side.py [--seconds 5] [--rounds 2]
        [--baseline ../wt/x/src] [--observability] [--smoke]

Writes benchmarks/results/relay_side_by_side.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    Output,
    add_output_options,
    cpu_seconds,
    free_port,
    need_tool,
    read_response,
    stamp,
    stop,
    wait_port,
)
from otel_ab import receiving

HERE = Path(__file__).resolve().parent
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
TARGETS = ("direct", "relay", "levergate")
OBSERVED = "levergate log+otel"
BODY = {"model": "sim-small", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}


@dataclass(frozen=True)
class Plan:
    seconds: int
    rounds: int
    connections: tuple[int, ...] = (16, 64)
    requests: int = 400  # per round-trip measurement

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        if args.smoke:
            return cls(1, 1, connections=(16,), requests=20)
        return cls(args.seconds, args.rounds)


@contextmanager
def started(
    command: list[str], port: int, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})  # fmt: skip
    try:
        wait_port(port, proc=proc)
        yield proc
    finally:
        stop(proc, seconds=15)


def wrk(url: str, connections: int, seconds: int, lua: Path, pid: int | None) -> dict[str, Any]:
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(lua),
         url + "/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    used = cpu_seconds(pid) - before if pid else 0.0
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "requests": total,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "cpu_ms_per_request": 1000 * used / max(1, total) if pid else None,
    }


def round_trips(port: int, *, requests: int, same: dict[str, Any] | None = None) -> float:
    """p50 ms of a request's whole round trip from a plain Python socket client on one
    keep-alive connection: distinct requests, or `same` every time (a cache hit after the
    first). The first tenth is a warm-up."""
    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(requests):
            body = same or {**BODY, "messages": [{"role": "user", "content": f"hello {i}"}]}
            raw = json.dumps(body).encode()
            request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                       b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                       % (len(raw), raw))  # fmt: skip
            started_at = time.perf_counter()
            sock.sendall(request)
            read_response(sock)
            times.append(1000 * (time.perf_counter() - started_at))
    return statistics.median(times[requests // 10 :])


def placements() -> dict[str, tuple[int, int]]:
    """The client's CPU and the servers' CPU of each c=1 placement this machine allows."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"same": (cpus[0], cpus[0])}
    return {"same": (cpus[0], cpus[0]), "split": (cpus[0], cpus[1])}


@contextmanager
def placed(pids: list[int], client: int, servers: int) -> Iterator[None]:
    """This process (the client) on CPU `client`, every thread of `pids` on `servers`; all
    back on every CPU after."""
    everything = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {client})
        for pid in pids:
            _pin_threads(pid, {servers})
        yield
    finally:
        os.sched_setaffinity(0, everything)
        for pid in pids:
            _pin_threads(pid, everything)


def _pin_threads(pid: int, cpus: set[int]) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


def run(plan: Plan, baseline: Path | None, *, observed: bool = False) -> dict[str, Any]:
    """`baseline`: another tree's `src`, served as a target ("levergate baseline"), so a change
    is measured before and after in the same run; `observed`: levergate with the request log
    and tracing on, as a target (`OBSERVED`)."""
    need_tool("wrk")
    with tempfile.TemporaryDirectory(prefix="levergate-relay-") as folder:
        return _run(plan, baseline, observed=observed, folder=Path(folder))


def _run(plan: Plan, baseline: Path | None, *, observed: bool, folder: Path) -> dict[str, Any]:
    targets = (*TARGETS, *(("levergate baseline",) if baseline else ()),
               *((OBSERVED,) if observed else ()))  # fmt: skip
    lua = folder / "post.lua"
    lua.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                   f"wrk.body = {json.dumps(json.dumps(BODY))}\n")  # fmt: skip
    ports = {name: free_port() for name in targets}
    sim = f"http://127.0.0.1:{ports['direct']}"
    commands = {
        "direct": [*LEVERGATE, "sim", "--port", str(ports["direct"]), "--ttft-ms", "0"],
        "relay": [sys.executable, str(HERE / "bare_relay.py"), "--port", str(ports["relay"]),
                  "--upstream", sim],
        **{name: [*LEVERGATE, "serve", "--upstream", sim + "/v1", "--port", str(ports[name])]
           for name in targets if name.startswith("levergate")},
    }  # fmt: skip
    envs = {"levergate baseline": {"PYTHONPATH": str(baseline)}} if baseline else {}
    envs[OBSERVED] = {
        "LEVERGATE_REQUEST_LOG__ENABLED": "true",
        "LEVERGATE_REQUEST_LOG__STORE__SQLITE_PATH": str(folder / "log.sqlite3"),
    }  # the receiver's endpoint is added once it runs
    rows: list[dict[str, Any]] = []
    hits = ("levergate cache hit", *(("levergate baseline cache hit",) if baseline else ()))
    where = placements()
    trips: dict[str, dict[str, list[float]]] = {
        placement: {name: [] for name in (*targets, *hits)} for placement in where
    }
    hit = {**BODY, "temperature": 0}
    with ExitStack() as stack:
        if observed:
            envs[OBSERVED]["LEVERGATE_OTEL__ENDPOINT"] = stack.enter_context(receiving())
        pids = {name: stack.enter_context(started(commands[name], ports[name], envs.get(name))).pid
                for name in targets}  # fmt: skip
        for name in targets:  # warm-up: imports, pools, first-use caches
            wrk(f"http://127.0.0.1:{ports[name]}", 16, 1, lua, None)
        for index in range(plan.rounds):
            for connections in plan.connections:
                for name in targets:
                    pid = pids[name] if name != "direct" else None
                    row = wrk(
                        f"http://127.0.0.1:{ports[name]}", connections, plan.seconds, lua, pid
                    )
                    rows.append({"round": index + 1, "target": name,
                                 "connections": connections, **row})  # fmt: skip
                    print(json.dumps(rows[-1]), flush=True)
            for placement, (client, servers) in where.items():
                runs = trips[placement]
                with placed(list(pids.values()), client, servers):
                    for name in targets:
                        runs[name].append(round_trips(ports[name], requests=plan.requests))
                    for name in hits:
                        by = ports[name.removesuffix(" cache hit")]
                        runs[name].append(round_trips(by, requests=plan.requests, same=hit))
    return {"rows": rows, "round_trip_p50_ms": trips, "load_average": os.getloadavg()}


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """Ratios to the relay, per connection count: medians over the rounds."""
    out: dict[str, Any] = {}
    for connections in sorted({r["connections"] for r in data["rows"]}):

        def median(target: str, key: str, c: int = connections) -> float:
            rows = data["rows"]
            found = [r[key] for r in rows if r["target"] == target and r["connections"] == c]
            return float(statistics.median(found))

        out[f"c{connections}"] = row = {
            "direct_rps": median("direct", "rps"), "relay_rps": median("relay", "rps"),
            "levergate_rps": median("levergate", "rps"),
            "rps_ratio": median("levergate", "rps") / median("relay", "rps"),
            "relay_cpu_ms": median("relay", "cpu_ms_per_request"),
            "levergate_cpu_ms": median("levergate", "cpu_ms_per_request"),
            "cpu_ratio": median("levergate", "cpu_ms_per_request")
            / median("relay", "cpu_ms_per_request"),
        }  # fmt: skip
        if any(r["target"] == OBSERVED for r in data["rows"]):
            row["observed_rps_ratio"] = median(OBSERVED, "rps") / row["levergate_rps"]
            row["observed_cpu_ratio"] = (median(OBSERVED, "cpu_ms_per_request")
                                         / row["levergate_cpu_ms"])  # fmt: skip
        if data.get("baseline"):
            row["baseline_rps_ratio"] = median("levergate baseline", "rps") / row["relay_rps"]
            row["baseline_cpu_ratio"] = (median("levergate baseline", "cpu_ms_per_request")
                                         / row["relay_cpu_ms"])  # fmt: skip
    out["c1"] = {}
    for placement, runs in data["round_trip_p50_ms"].items():
        trips = {name: statistics.median(values) for name, values in runs.items()}
        out["c1"][placement] = c1 = {
            **trips,
            "levergate_minus_relay_ms": trips["levergate"] - trips["relay"],
            "cache_hit_over_direct": trips["levergate cache hit"] / trips["direct"],
        }
        if OBSERVED in trips:
            c1["observed_minus_levergate_ms"] = trips[OBSERVED] - trips["levergate"]
        if "levergate baseline cache hit" in trips:
            c1["baseline_minus_relay_ms"] = trips["levergate baseline"] - trips["relay"]
            c1["baseline_cache_hit_over_direct"] = (trips["levergate baseline cache hit"]
                                                    / trips["direct"])  # fmt: skip
    return out


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    load = ", ".join(f"{x:.2f}" for x in data["load_average"])
    lines = [
        f"# levergate against a bare relay ({data['date']}, {data['machine']})", "",
        (f"One run, {data['rounds']} alternating rounds of {data['seconds']} s per target "
         f"(direct | bare relay | levergate), wrk -t1, 0 ms simulator; load average at the end "
         f"{load} (a shared machine). Ratios are medians over the rounds."), "",
        ("| connections | direct req/s | relay req/s | levergate req/s | levergate / relay "
         "| relay CPU ms/req | levergate CPU ms/req | CPU levergate / relay |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for key, row in s.items():
        if key == "c1":
            continue
        lines.append(
            f"| {key[1:]} | {row['direct_rps']:,.0f} | {row['relay_rps']:,.0f} | "
            f"{row['levergate_rps']:,.0f} | {row['rps_ratio']:.2f}x | {row['relay_cpu_ms']:.3f} | "
            f"{row['levergate_cpu_ms']:.3f} | {row['cpu_ratio']:.2f}x |"
        )
        if "baseline_rps_ratio" in row:
            lines.append(f"| {key[1:]}, baseline ({data['baseline']}) | | | | "
                         f"{row['baseline_rps_ratio']:.2f}x | | | "
                         f"{row['baseline_cpu_ratio']:.2f}x |")  # fmt: skip
    lines += [
        "", ("Concurrency 1, a Python socket client's round trip (p50 ms), client and servers "
             "pinned to one CPU (same) or two (split):"), "",
        ("| CPUs | direct | relay | levergate | levergate - relay | cache hit "
         "| hit / direct |"),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for placement, c1 in s["c1"].items():
        lines.append(
            f"| {placement} | {c1['direct']:.3f} | {c1['relay']:.3f} | {c1['levergate']:.3f} | "
            f"{c1['levergate_minus_relay_ms']:+.3f} | {c1['levergate cache hit']:.3f} | "
            f"{c1['cache_hit_over_direct']:.2f}x |"
        )
        if "baseline_cache_hit_over_direct" in c1:
            lines.append(
                f"| {placement}, baseline ({data['baseline']}) | | | "
                f"{c1['levergate baseline']:.3f} | {c1['baseline_minus_relay_ms']:+.3f} | "
                f"{c1['levergate baseline cache hit']:.3f} | "
                f"{c1['baseline_cache_hit_over_direct']:.2f}x |"
            )
    lines += _observed(s)
    lines += [
        "", "Every wrk run, in order:", "",
        "| round | connections | target | req/s | non-2xx | CPU ms/req |",
        "|---|---|---|---:|---:|---:|",
    ]  # fmt: skip
    for r in data["rows"]:
        cpu = "-" if r["cpu_ms_per_request"] is None else f"{r['cpu_ms_per_request']:.3f}"
        lines.append(f"| {r['round']} | {r['connections']} | {r['target']} | {r['rps']:,.0f} | "
                     f"{r['non_2xx']} | {cpu} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _observed(s: dict[str, Any]) -> list[str]:
    """The table of levergate with the log and tracing on against levergate off, if measured."""
    observed = {key: row for key, row in s.items() if "observed_cpu_ratio" in row}
    if not observed:
        return []
    return [
        "", ("levergate with the request log and OpenTelemetry on (every request logged to "
             "SQLite and traced, its spans exported) against levergate with both off, in the "
             "same rounds (issue 22: CPU <= 1.1x):"), "",
        "| connections | req/s, on / off | CPU per request, on / off |",
        "|---|---:|---:|",
        *(f"| {key[1:]} | {row['observed_rps_ratio']:.3f}x | {row['observed_cpu_ratio']:.3f}x |"
          for key, row in observed.items()),
        *(f"| 1 ({placement}), p50 | {c1['observed_minus_levergate_ms']:+.3f} ms | |"
          for placement, c1 in s["c1"].items() if "observed_minus_levergate_ms" in c1),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="another tree's src/, a fourth target")
    parser.add_argument("--baseline-name", default="baseline", help="what the baseline is")
    parser.add_argument(
        "--observability", action="store_true",
        help=f"a target more: {OBSERVED} (the request log and tracing on)",
    )  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    plan = Plan.of(args)
    data = {**stamp(), "seconds": plan.seconds, "rounds": plan.rounds,
            "baseline": args.baseline_name if args.baseline else None,
            **run(plan, args.baseline, observed=args.observability or args.smoke)}  # fmt: skip
    data["summary"] = summary(data)
    out.write("relay_side_by_side", data, markdown(data))


if __name__ == "__main__":
    main()
