"""What do OpenTelemetry traces cost, alone and with the request log (issue 22 §3: log + OTel
<= 1.1x the CPU of log-off)? CPU per request of the whole in-process path (httpx client,
gateway, simulator in one process, as `inprocess_cpu.py`) on four sides — off, otel, log,
log+otel — in alternating rounds (each in its own child process) so all see the same machine at
the same moments. "otel" exports every request's span and its attempt's child over OTLP/HTTP to
a receiver in another process (which answers 200 and drops them); "log" writes every record to
a SQLite request log in a temporary folder; the exporter's and the log's work and the gateway's
close (which exports and writes what is queued) are inside the measured CPU. Callgrind's counts
of the same (benchmarks/otel_instructions.py) do not move with the machine's load.

    python benchmarks/otel_ab.py [--rounds 4] [--requests 3000]
    python benchmarks/otel_ab.py --smoke

Writes benchmarks/results/otel_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness import Output, add_output_options, free_port, paired, stamp, stop, turned, wait_port

SIDES = ("off", "otel", "log", "log+otel")


async def cpu_per_request(
    requests: int, *, stream: bool, endpoint: str | None, log: str | None
) -> float:
    """Microseconds of this process's CPU per request (client + gateway + simulator + export
    + log), steady state: `inprocess_cpu.cpu_per_request`'s window (every request's record
    written and spans exported in it, what a process pays once outside)."""
    from inprocess_cpu import timed

    make = functools.partial(side_settings, endpoint=endpoint, log=log)
    return await timed(make, requests, stream=stream)


def side_settings(base_url: str, *, endpoint: str | None, log: str | None) -> Any:
    """A side's settings: tracing to `endpoint`, the request log into the SQLite file `log`."""
    from levergate.config import Settings

    values: dict[str, Any] = {"otel": {"endpoint": endpoint} if endpoint else {}}
    if log:
        values["request_log"] = {"enabled": True, "store": {"sqlite_path": log}}
    return Settings.for_upstream(base_url, **values)


class _Drop(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


@contextmanager
def receiving() -> Iterator[str]:
    """An OTLP/HTTP receiver in a process of its own, answering 200 and dropping the spans
    (`_Drop`): its endpoint, while the block runs."""
    port = free_port()
    receiver = subprocess.Popen([sys.executable, __file__, "--receiver", str(port)])
    try:
        wait_port(port, proc=receiver)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(receiver)


def child(requests: int, endpoint: str | None, log: str | None) -> None:
    result = {}
    for kind in ("stream", "whole"):
        path = f"{log}-{kind}.sqlite3" if log else None
        result[kind] = asyncio.run(cpu_per_request(requests, stream=kind == "stream",
                                                   endpoint=endpoint, log=path))  # fmt: skip
    print(json.dumps(result))


def run_child(requests: int, endpoint: str | None, log: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "--requests", str(requests)]
    if endpoint:
        argv += ["--endpoint", endpoint]
    if log:
        argv += ["--log", log]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--receiver", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--log", default=None, help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.receiver:
        ThreadingHTTPServer(("127.0.0.1", args.receiver), _Drop).serve_forever()
    if args.child:
        child(args.requests, args.endpoint, args.log)
        return
    out = Output.of(args)
    if args.smoke:
        args.rounds, args.requests = 1, 50
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with (
        receiving() as endpoint,
        tempfile.TemporaryDirectory(prefix="levergate-otel-ab-") as folder,
    ):
        for n in range(args.rounds):
            for side in turned(SIDES, n):
                log = f"{folder}/{side}-{n}" if "log" in side else None
                runs[side].append(run_child(args.requests, endpoint if "otel" in side
                                            else None, log))  # fmt: skip
    report(runs, args, out)


def report(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace, out: Output) -> None:
    data: dict[str, Any] = {**stamp(), "rounds": args.rounds, "requests": args.requests,
                            "runs": runs}  # fmt: skip
    rows = []
    for what in ("stream", "whole"):
        median = {side: statistics.median(r[what] for r in runs[side]) for side in SIDES}
        data[what] = {f"{side}_us": median[side] for side in SIDES}
        data[what].update({f"{side}_ratio": median[side] / median["off"] for side in SIDES[1:]})
        cells = [f"{median[side]:.1f}" for side in SIDES]
        cells += [f"{median[side] / median['off']:.3f}" for side in SIDES[1:]]
        pairs = {side: paired([r[what] for r in runs[side]], [r[what] for r in runs["off"]])
                 for side in SIDES[1:]}  # fmt: skip
        data[what].update({f"{side}_paired": pairs[side] for side in SIDES[1:]})
        cells += [f"{r:.3f} ({lo:.3f}-{hi:.3f})" for r, lo, hi in pairs.values()]
        spread = " / ".join(", ".join(f"{r[what]:.0f}" for r in runs[side]) for side in SIDES)
        rows.append(f"| {what} | " + " | ".join(cells) + f" | {spread} |")
    markdown = (
        f"# OpenTelemetry traces and the request log A/B ({data['date']}, {data['machine']})\n\n"
        f"`benchmarks/otel_ab.py --rounds {args.rounds} --requests {args.requests}`: CPU "
        "microseconds per request of the in-process path (client, gateway and simulator in one "
        "process), medians of rounds (each round runs the four sides, in an order that turns "
        "each round; paired: the median of each round's own ratio to off, and its quartiles): "
        "off (no log, no tracing), otel (every request "
        "traced and exported to a receiver in another process), log (the SQLite request log "
        "on), log+otel. Issue 22's target: log+otel / off <= 1.1x. Load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end.\n\n"
        "| path | off us/req | otel us/req | log us/req | log+otel us/req | otel / off | "
        "log / off | log+otel / off | paired otel / off | paired log / off | paired log+otel / "
        "off | rounds off / otel / log / log+otel |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )  # fmt: skip
    out.write("otel_ab", data, markdown)


if __name__ == "__main__":
    main()
