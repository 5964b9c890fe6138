"""Instructions per request with tracing and the request log on, counted by callgrind (issue 22
§3: "with the request log and OTel on: <= 1.1x the CPU of log-off"). CPU time on this shared
machine moves by more than the effect (instructions.py's docstring); instructions do not.

The method is instructions.py's log A/B: the same process set-up serving N and then 2N requests
after the same warm-up, every thread of the process counted from the end of the warm-up to its
exit (the close included: the log writes and the exporter exports what is queued), so
(I(2N) - I(N)) / N is one request's instructions. Four sides: off (no log, no tracing), otel
(every request traced and exported), log (the request log on, SQLite), log + otel. Tracing
exports to a receiver in this process (not counted), which checks that every span arrived.
Benchmark-only settings, the same on every side, so that nothing counted depends on the wall
clock (callgrind runs the code ~50x slower): the log's as instructions.py sets them, and the
exporter's interval and timeout at 600 s: it exports full batches (512 spans) and at the close.

    python benchmarks/otel_instructions.py [--requests 300] [--warmup 300]
        [--rows inprocess:whole,inprocess:stream,simulator:whole] [--sides off,otel,log,log+otel]
        [--baseline OTHER_TREE/src --baseline-name NAME]   # its otel side too, same run
    python benchmarks/otel_instructions.py --smoke

Writes benchmarks/results/otel_instructions.{json,md}.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp
from instructions import (
    callgrind,
    counted_all,
    environment,
    instructions,
    per_request,
)
from instructions import child as counted_child

SIDES = ("off", "otel", "log", "log+otel")
ROWS = (("inprocess", "whole"), ("inprocess", "stream"), ("simulator", "whole"))
# The exporter's wall-clock bounds out of reach: it exports full batches and at the close, and
# the close's export, stretched ~50x by callgrind, is not cut off by `timeout_seconds` (at 10 s
# a loaded run's close dropped 264 of 1,800 spans).
NO_OTEL_TIMER = {"export_interval_seconds": 600, "timeout_seconds": 600}


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver on loopback that counts the spans it was sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans = 0
        self.lock = threading.Lock()
        decode = ExportTraceServiceRequest.FromString
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                message = decode(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                found = sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
                with server.lock:
                    server.spans += found
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def child(args: argparse.Namespace) -> None:
    """A counted run (instructions.py's), tracing to `--otel` when given."""
    counted_child(args, **({"otel": {"endpoint": args.otel, **NO_OTEL_TIMER}} if args.otel else {}))


def counted(folder: Path, name: str, *, side: str, way: str, kind: str, requests: int,
            warmup: int, src: Path | None) -> int:  # fmt: skip
    out = folder / f"{name}.callgrind"
    argv = [*callgrind(out, at_start=False), sys.executable, str(Path(__file__).resolve()),
            "--child", "--way", way, "--kind", kind, "--requests", str(requests),
            "--warmup", str(warmup)]  # fmt: skip
    if "log" in side:
        argv += ["--request-log", str(folder / f"{name}.sqlite3")]
    receiver = Receiver() if "otel" in side else None
    if receiver is not None:
        argv += ["--otel", receiver.url]
    env = environment()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(Path(__file__).parent)])
    try:
        subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
        if receiver is not None:
            expected = 2 * (warmup + requests)  # the request's span and its attempt's
            if receiver.spans != expected and src is None:
                raise RuntimeError(f"{name}: {receiver.spans} spans exported, not {expected}")
            if receiver.spans != expected:  # a baseline's exporter may drop: say so
                print(f"{name}: {receiver.spans} spans exported of {expected}", file=sys.stderr)
    finally:
        if receiver is not None:
            receiver.shutdown()
            receiver.server_close()
    return instructions(out)


def run(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    rows = []
    targets: list[tuple[str, str, Path | None]] = [(side, side, None) for side in args.sides]
    if args.baseline:
        targets.append((f"{args.baseline_name}: otel", "otel", args.baseline.resolve()))
    for way, kind in args.rows:
        runs = {
            f"{label}-{n}": functools.partial(
                counted, folder, f"{way}-{kind}-{label.replace(' ', '_').replace(':', '')}-{n}",
                side=side, way=way, kind=kind, requests=n, warmup=args.warmup, src=src)
            for label, side, src in targets for n in (args.requests, 2 * args.requests)
        }  # fmt: skip
        counts = counted_all(runs, args.parallel)
        row: dict[str, Any] = {"way": way, "kind": kind}
        row.update((label, per_request(counts, label, args.requests)) for label, _, _ in targets)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def markdown(data: dict[str, Any]) -> str:
    labels = [k for k in data["rows"][0] if k not in {"way", "kind"}] if data["rows"] else []
    lines = [
        (f"# Instructions per request, tracing and the request log ({data['date']}, "
         f"{data['machine']})"), "",
        (f"`benchmarks/otel_instructions.py --requests {data['requests']} --warmup "
         f"{data['warmup']}`: (I(2N) - I(N)) / N, user-space instructions of the whole process "
         "(every thread) serving 2N and N requests after the same warm-up, counted by "
         "callgrind; the close (the log's last write, the exporter's last export) included. "
         "`inprocess`: `levergate.bench.calls`' path (httpx over `GatewayTransport`, an "
         "upstream answering from memory, distinct requests); `simulator`: `inprocess_cpu.py`'s "
         "(the simulator in the process, the same request each time). Sides: off (no log, no "
         "tracing), otel (every request traced and exported over OTLP/HTTP to a receiver in "
         "the benchmark's process, which checked every span arrived), log (the request log on, "
         "SQLite), log+otel. Issue 22's target: log+otel / off <= 1.1x. The start-up heap is "
         "frozen before counting (instructions.py): the full collections a side's survivors "
         "start are not in these counts (otel_where.md counts the collections). "
         f"Load average {data['load_average']} at the end."), "",
    ]  # fmt: skip
    head = "| path | " + " | ".join(f"{label} instr/req" for label in labels)
    head += " | " + " | ".join(f"{label} / off" for label in labels if label != "off") + " |"
    lines += [head, "|---|" + "---:|" * (2 * len(labels) - 1)]
    for row in data["rows"]:
        cells = [f"{row[label]:,.0f}" for label in labels]
        cells += [f"{row[label] / row['off']:.3f}x" for label in labels if label != "off"]
        lines.append(f"| {row['way']}, {row['kind']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--rows", default=",".join(f"{w}:{k}" for w, k in ROWS))
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="another tree's src/: its otel side too")
    parser.add_argument("--baseline-name", default="baseline")
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this folder")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--way", default="inprocess", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="whole", help=argparse.SUPPRESS)
    parser.add_argument("--request-log", help=argparse.SUPPRESS)
    parser.add_argument("--otel", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    out = Output.of(args)
    args.rows = [tuple(r.split(":", 1)) for r in args.rows.split(",")]
    args.sides = args.sides.split(",")
    if args.smoke:
        args.requests, args.warmup, args.rows, args.parallel = 3, 2, [("inprocess", "whole")], 4
        # Neither feature and both take every branch of the child: 4 callgrind children, not 8
        # (each starts Python under valgrind: ~6 s of CPU on a 2-core host before a request).
        args.sides = ["off", "log+otel"]
    with tempfile.TemporaryDirectory(prefix="levergate-otel-instructions-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rows = run(args, folder)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data = {**stamp(), "requests": args.requests, "warmup": args.warmup, "rows": rows,
            "load_average": load}  # fmt: skip
    out.write("otel_instructions", data, markdown(data))


if __name__ == "__main__":
    main()
