"""Capacity behind a load balancer: requests per second per replica and per core through HAProxy,
as ratios against one replica reached directly, in the same run.

One `levergate sim` (zero simulated latency: the fake fast upstream), up to three
`levergate serve` replicas in front of it (a plain proxy: cache off, no limits, so that what is
measured is the gateway's own work per request), and one HAProxy with a frontend per variant,
its `global` and `defaults` sections those of the compose stack's `deploy/compose/haproxy.cfg`
(access log included; written to /dev/null here) and each backend balanced and health-checked
as there (`balance leastconn`, `/readyz`). wrk (closed loop, one thread, 64 keep-alive
connections, small non-streaming chat completions) loads each variant in turn, in alternating
rounds, so that a change in the machine's load falls on every variant alike:

    direct-1   wrk -> replica 1
    lb-1       wrk -> HAProxy -> replica 1
    lb-2       wrk -> HAProxy -> replicas 1, 2
    lb-3       wrk -> HAProxy -> replicas 1, 2, 3

Each measurement also reads the CPU time every process spent (/proc; wrk's from its rusage),
which gives the per-core figures: requests per second of one fully busy gateway core (requests
/ the replicas' CPU seconds), the CPU each part took, and whether the machine was saturated.
Everything runs on the same cores: on a machine with fewer cores than the parts need (2 cores
here, for wrk, HAProxy, the simulator and the replicas), added replicas find no idle core, the
requests per second stop growing, and the per-core figures are the ones that carry to a machine
with a core per replica. Other work on the machine lowers every variant: its load average is
recorded before each measurement.

    PYTHONPATH=src python benchmarks/capacity.py [--duration 8] [--rounds 3] [--replicas 3]
    PYTHONPATH=src python benchmarks/capacity.py --smoke    # two replicas, 1 s each

writes benchmarks/results/capacity.json and .md. Needs `wrk` and `haproxy` (Debian packages).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from harness import (
    ROOT,
    Output,
    add_output_options,
    cpu_seconds,
    free_port,
    missing,
    need_tool,
    stamp,
    stop,
    wait_http,
)
from workers import LUA, environment, start_gateway

from levergate.testing.replicas import haproxy_binary

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
SHIPPED = ROOT / "deploy" / "compose" / "haproxy.cfg"
DIRECT = "direct-1"


# HAProxy needs two descriptors per connection it may hold: the shipped `maxconn` (20,000) asks
# for more than this machine's open-file limit allows, and 64 connections are far from either.
MAXCONN = 4096


def shipped_sections() -> str:
    """The `global` and `defaults` sections of the compose stack's HAProxy file, `maxconn` aside."""
    kept: list[str] = []
    keep = False
    for line in SHIPPED.read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            keep = line.split()[0] in {"global", "defaults"}
        if keep:
            kept.append(re.sub(r"^(\s+maxconn) \d+$", rf"\1 {MAXCONN}", line))
    return "\n".join(kept) + "\n"


def haproxy_config(frontends: dict[str, int], replicas: list[int]) -> str:
    """A frontend per `lb-N` variant, each to a backend of the first N replicas."""
    parts = [shipped_sections()]
    for name, port in frontends.items():
        count = int(name.removeprefix("lb-"))
        servers = "".join(
            f"    server r{i} 127.0.0.1:{p}\n" for i, p in enumerate(replicas[:count])
        )
        parts.append(
            f"frontend {name}\n    bind 127.0.0.1:{port}\n    default_backend {name}-replicas\n\n"
            f"backend {name}-replicas\n    balance leastconn\n    option httpchk GET /readyz\n"
            f"    http-check expect status 200\n    default-server check inter 2s fall 2 rise 2\n"
            f"{servers}"
        )  # fmt: skip
    return "\n".join(parts)


def variants(replicas: int) -> list[str]:
    return [DIRECT, *(f"lb-{n}" for n in range(1, replicas + 1))]


def wrk(port: int, *, duration: int, connections: int, script: Path) -> dict[str, Any]:
    """One closed-loop wrk run; its own CPU seconds from the children's rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-s", str(script),
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    requests = re.search(r"(\d+) requests in ([\d.]+)(m?s|m)\b", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    if requests is None:
        raise RuntimeError(f"wrk printed no count:\n{out}")
    return {
        "requests": int(requests[1]),
        "seconds": float(requests[2]) * {"ms": 0.001, "s": 1, "m": 60}[requests[3]],
        "non_2xx": int(errors[1]) if errors else 0,
        "socket_errors": socket_errors[0] if socket_errors else "",
        "wrk_cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
    }


class Rig:
    """The simulator, the replicas and HAProxy, started once for every round."""

    def __init__(self, folder: Path, replicas: int) -> None:
        self.folder = folder
        self.count = replicas
        self.sim: subprocess.Popen[bytes] | None = None
        self.replicas: list[tuple[subprocess.Popen[bytes], int]] = []
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}

    @contextmanager
    def running(self) -> Iterator[Rig]:
        with ExitStack() as stack:
            sim_port = free_port()
            self.sim = subprocess.Popen(
                [*LEVERGATE, "sim", "--port", str(sim_port)], env=environment(self.folder),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            stack.callback(stop, self.sim)
            wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
            for _ in range(self.count):
                proc, port = start_gateway(self.folder, sim_port=sim_port, workers=1, store=None)
                stack.callback(stop, proc, seconds=30)
                self.replicas.append((proc, port))
            self._start_haproxy(stack)
            yield self

    def _start_haproxy(self, stack: ExitStack) -> None:
        names = [v for v in variants(self.count) if v != DIRECT]
        frontends = {name: free_port() for name in names}
        config = self.folder / "haproxy.cfg"
        config.write_text(haproxy_config(frontends, [port for _, port in self.replicas]))
        with (self.folder / "haproxy.log").open("wb") as log:  # its start-up warnings
            self.haproxy = subprocess.Popen([haproxy_binary(), "-db", "-f", str(config)],
                                            stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
        stack.callback(stop, self.haproxy)
        self.ports = {DIRECT: self.replicas[0][1], **frontends}
        for port in frontends.values():
            wait_http(f"http://127.0.0.1:{port}/readyz")

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each part (the replicas together)."""
        if self.sim is None or self.haproxy is None:
            raise RuntimeError("the rig is not running")
        return {
            "gateway": cpu_seconds(*(proc.pid for proc, _ in self.replicas)),
            "haproxy": cpu_seconds(self.haproxy.pid),
            "sim": cpu_seconds(self.sim.pid),
        }


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of every core so far, from /proc/stat's first line."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    total = sum(ticks[:8])  # guest time is already inside user
    return total - idle, total


def measure_one(rig: Rig, name: str, args: argparse.Namespace, script: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    before, machine_before = rig.cpu(), machine_jiffies()
    result = wrk(rig.ports[name], duration=args.duration, connections=args.connections,
                 script=script)  # fmt: skip
    after, machine_after = rig.cpu(), machine_jiffies()
    seconds = result["seconds"]
    busy = {part: (after[part] - before[part]) / seconds for part in after}
    busy["wrk"] = result.pop("wrk_cpu") / seconds
    # Everything else the machine ran meanwhile (other engineers' work): its busy share of all
    # the cores, less what the parts here took.
    ticks = machine_after[1] - machine_before[1]
    machine = (machine_after[0] - machine_before[0]) / ticks * (os.cpu_count() or 1)
    busy["others"] = max(0.0, machine - sum(busy.values()))
    rps = result["requests"] / seconds
    return {
        **result,
        "rps": round(rps, 1),
        "load_before": round(load, 2),
        "cores_busy": {part: round(value, 3) for part, value in busy.items()},
        # What one fully busy core of gateway serves: requests / the replicas' CPU seconds.
        "rps_per_gateway_core": round(rps / busy["gateway"], 1) if busy["gateway"] else None,
    }


def measure(args: argparse.Namespace, folder: Path) -> dict[str, list[dict[str, Any]]]:
    script = folder / "post.lua"
    script.write_text(LUA)
    names = variants(args.replicas)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with Rig(folder, args.replicas).running() as rig:
        for name in names if args.warmup else []:  # connections, the replicas' first requests
            wrk(rig.ports[name], duration=args.warmup, connections=args.connections, script=script)
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                result = measure_one(rig, name, args, script)
                result["round"] = round_
                runs[name].append(result)
                print(f"round {round_} {name}: {result['rps']:.0f} req/s, "
                      f"{result['rps_per_gateway_core']} per gateway core "
                      f"(load {result['load_before']})", file=sys.stderr)  # fmt: skip
                time.sleep(args.pause)  # the last connections close before the next variant
    return runs


def paired(runs: dict[str, list[dict[str, Any]]], top: str, key: str) -> float:
    """The median over rounds of each round's ratio against one replica direct: measured seconds
    apart, so a change in the machine's load between rounds cancels out."""
    return float(statistics.median(
        a[key] / b[key] for a, b in zip(runs[top], runs[DIRECT], strict=True) if a[key] and b[key]
    ))  # fmt: skip


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    cores = os.cpu_count() or 1
    out: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        replicas = 1 if name == DIRECT else int(name.removeprefix("lb-"))
        rps = statistics.median(r["rps"] for r in rs)
        busy = {part: statistics.median(r["cores_busy"][part] for r in rs)
                for part in rs[0]["cores_busy"]}  # fmt: skip
        out[name] = {
            "replicas": replicas,
            "median_rps": round(rps, 1),
            "rps_per_replica": round(rps / replicas, 1),
            "rps_per_machine_core": round(rps / cores, 1),
            "rps_per_gateway_core": statistics.median(r["rps_per_gateway_core"] or 0 for r in rs),
            "cores_busy": {part: round(value, 2) for part, value in busy.items()},
            "cores_busy_machine": round(sum(busy.values()), 2),
            "ratio_rps_vs_direct": round(paired(runs, name, "rps"), 3),
            "ratio_per_gateway_core_vs_direct": round(
                paired(runs, name, "rps_per_gateway_core"), 3
            ),
            "non_2xx": sum(r["non_2xx"] for r in rs),
            "socket_errors": sorted({r["socket_errors"] for r in rs if r["socket_errors"]}),
        }
    return out


def report(
    runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace
) -> tuple[dict[str, Any], str]:
    table = summary(runs)
    loads = [r["load_before"] for rs in runs.values() for r in rs]
    cores = os.cpu_count() or 1
    data = {
        **stamp(), "cores": cores, "duration_seconds": args.duration, "rounds": args.rounds,
        "connections": args.connections, "variants": table,
        "load_average_range": [min(loads), max(loads)], "runs": runs,
    }  # fmt: skip
    lines = [
        "# Capacity through a load balancer: requests per second per replica and per core", "",
        (f"{data['date']}, {data['machine']}. `levergate sim` (zero latency), `levergate serve` "
         f"replicas (plain proxy), HAProxy with the compose stack's settings, wrk (one thread, "
         f"{args.connections} keep-alive connections, {args.duration} s per measurement, "
         f"{args.rounds} alternating rounds), all on the same {cores} cores."),
        "", ("| variant | req/s | x direct | per replica | per machine core | per gateway core "
             "| x direct | cores busy: gateway / haproxy / sim / wrk / others = machine "
             "| non-2xx |"),
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]  # fmt: skip
    for name, row in table.items():
        busy = row["cores_busy"]
        lines.append(
            f"| {name} | {row['median_rps']:.0f} | {row['ratio_rps_vs_direct']:.2f} | "
            f"{row['rps_per_replica']:.0f} | {row['rps_per_machine_core']:.0f} | "
            f"{row['rps_per_gateway_core']:.0f} | {row['ratio_per_gateway_core_vs_direct']:.2f} | "
            f"{busy['gateway']:.2f} / {busy['haproxy']:.2f} / {busy['sim']:.2f} / "
            f"{busy['wrk']:.2f} / {busy['others']:.2f} = {row['cores_busy_machine']:.2f} | "
            f"{row['non_2xx']} |"
        )
    lines += ["", *notes(table, cores, loads)]
    return data, "\n".join(lines) + "\n"


def notes(table: dict[str, dict[str, Any]], cores: int, loads: list[float]) -> list[str]:
    saturated = [n for n, row in table.items() if row["cores_busy_machine"] >= 0.9 * cores]
    return [
        ("`x direct`: the median over rounds of each round's own ratio against `direct-1`. "
         "`per gateway core`: requests per second of one fully busy gateway core (requests / the "
         "replicas' CPU seconds), the figure that carries to a machine with a core per replica."),
        "",
        (f"Saturated (the machine at least 90% busy, on its {cores} cores, `others` included): "
         f"{', '.join(saturated) if saturated else 'none'}. Where the machine is saturated, more "
         "replicas only share the same cores: their requests per second cannot grow here."),
        "",
        (f"Load average (1 min) before the measurements: {min(loads):.1f} to {max(loads):.1f} on "
         f"{cores} cores. The machine is shared with other engineers' tests and benchmarks, which "
         "lowers every variant; alternating rounds keep the ratios fair, not the absolute "
         "figures."),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3, choices=range(1, 7))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=1, help="seconds per variant, once")
    add_output_options(parser)
    args = parser.parse_args()
    output = Output.of(args)
    need_tool("wrk")
    try:
        haproxy_binary()
    except RuntimeError as exc:
        missing(f"{exc} (apt-get install -y haproxy)")
    if args.smoke:
        args.duration, args.rounds, args.replicas, args.connections = 1, 1, 2, 8
        args.warmup = 0
    args.pause = 0 if args.smoke else 0.5
    with tempfile.TemporaryDirectory(prefix="levergate-capacity-") as tmp:
        runs = measure(args, Path(tmp))
    data, markdown = report(runs, args)
    output.write("capacity", data, markdown)


if __name__ == "__main__":
    main()
