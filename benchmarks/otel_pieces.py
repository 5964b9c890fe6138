"""Instructions of tracing's pieces, counted by callgrind (issue 22 §3, log + OTel <= 1.1x):
what `otel_instructions.py` counts whole, split so a change to one piece can be measured alone.

A child process serves 64 requests (whole and streamed, alternating) through the gateway with
the simulator in the process and tracing on, keeps the (record, trace context) pairs the tracer
got, then, with callgrind's instrumentation switched on, repeats one piece R times over them:

- `path`: the request path's tracing work, as the gateway does it for a request: the trace
  context (`Spans.begin`; since 2026-12-05 `begin`), the attempt (`Spans.attempt`), the
  upstream's `traceparent` and its header dict (since 2026-12-05 both from `Spans.sent`), the
  attempt's end, the exporter's `export` (since 2026-12-04 the spans' encoding, before it the
  queue's append of the record);
- `encode`: `SpanEncoder.request`, the request's span and its attempt's, OTLP bytes;
- `export`: one POST of 512 encoded spans (`SpanExporter._send`) to a receiver in another
  process (HTTP/1.0: a connection each export), per export.

(I(2R) - I(R)) / (R x records) is one request's instructions (`export`: one export's).

    python benchmarks/otel_pieces.py [--reps 20] [--src OTHER_TREE/src --src-name NAME]
    python benchmarks/otel_pieces.py --smoke

Writes benchmarks/results/otel_pieces.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp
from instructions import callgrind, environment, instructions
from otel_instructions import Receiver

PIECES = ("path", "encode", "export")
RECORDS = 64  # requests served before counting; each one's (record, spans) is kept


def child(piece: str, reps: int, endpoint: str) -> None:
    asyncio.run(_child(piece, reps, endpoint))


async def _child(piece: str, reps: int, endpoint: str) -> None:
    import httpx
    from inprocess_cpu import BODY

    from levergate import Settings
    from levergate.app import build_gateway
    from levergate.otel import exporter
    from levergate.server.transport import GatewayTransport
    from levergate.simulator import SimSettings, run_simulator

    kept: list[tuple[Any, Any]] = []
    export = exporter.SpanExporter.export

    def keeping(self: Any, record: Any, spans: Any) -> None:
        kept.append((record, spans))
        export(self, record, spans)

    exporter.SpanExporter.export = keeping  # type: ignore[method-assign]
    otel = {"endpoint": endpoint, "export_interval_seconds": 600, "timeout_seconds": 600}
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url, otel=otel,
                                         prompt_cache={"lint": {"enabled": False}})  # fmt: skip
        gateway = build_gateway(settings)
        async with gateway, httpx.AsyncClient(transport=GatewayTransport(gateway),
                                              base_url="http://lg/v1") as http:  # fmt: skip
            for index in range(RECORDS):
                body = {**BODY, "stream": index % 2 == 1}
                await (await http.post("/chat/completions", json=body)).aread()
            await asyncio.sleep(0.1)  # the last record is made after the answer went out
            exporter.SpanExporter.export = export  # type: ignore[method-assign]
            tracer = next(
                t for t in gateway.recorder._tracers if isinstance(t, exporter.SpanExporter)
            )
            await _repeat(piece, reps, kept, tracer)
            print(len(kept))
            os._exit(0)  # the close is not counted (nor needed)


async def _repeat(piece: str, reps: int, kept: list[tuple[Any, Any]], tracer: Any) -> None:
    """`piece` `reps` times over the `kept` records, counted (the instrumentation on)."""
    from levergate.core import spans as core_spans
    from levergate.core.spans import Spans

    encoder, base_ns = tracer._encoder, time.time_ns()
    # A request's spans in one `bytes` since 2026-12-05 (h/otel4), a list of them before.
    spans_bytes = [b for r, s in kept for b in _listed(encoder.request(r, s, base_ns))]
    batch = (spans_bytes * (1 + 512 // len(spans_bytes)))[:512]
    headers = {"content-type": "application/json", "host": "lg"}
    upstream = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    # The newer code takes the start times the gateway already read; the older reads
    # the clock itself.
    # Since 2026-12-05 the request path calls `begin` and `Spans.sent`, attempts are lists
    # ended by `end`, the upstream's headers a copy with the traceparent set.
    lists = hasattr(Spans, "sent")
    params = {} if lists else inspect.signature(Spans.begin).parameters
    more = {"started": 1.0} if "started" in params else {}
    timed = "started" in inspect.signature(Spans.attempt).parameters
    gc.collect()
    gc.freeze()
    _count_from_here()
    for _ in range(reps):
        if piece == "path" and lists:
            begin, end = core_spans.begin, core_spans.end  # type: ignore[attr-defined]
            for record, _ in kept:
                spans = begin(headers, 1.0, None, 1.0)
                sent = upstream.copy()
                attempt, sent["traceparent"] = spans.sent("sim", "sim-small", 1.0)
                del sent
                if attempt is not None:
                    end(attempt)
                tracer.export(record, spans)
            tracer._queue.clear()
            if hasattr(tracer, "_counts"):  # since h/otel4: spans counted beside the queue
                tracer._counts.clear()
                tracer._spans = 0
        elif piece == "path":
            for record, _ in kept:
                spans = Spans.begin(headers, ratio=1.0, parent=None, **more)
                attempt = spans.attempt("sim", "sim-small", 1.0) if timed else (
                    spans.attempt("sim", "sim-small"))  # fmt: skip
                sent = {**upstream, "traceparent": spans.traceparent(attempt)}
                del sent
                if attempt is not None:
                    attempt.end()
                tracer.export(record, spans)
            tracer._queue.clear()
            if hasattr(tracer, "_queued"):  # the tree before: records queued, not spans
                tracer._queued = 0
        elif piece == "encode":
            for record, spans in kept:
                encoder.request(record, spans, base_ns)
        else:
            if hasattr(tracer, "_encoded"):  # the tree before
                tracer._encoded[:] = batch
            else:
                tracer._sending = list(batch)
                tracer._sending_spans = len(batch)  # since h/otel4 (no harm before)
            await tracer._send(None)


def _listed(spans: bytes | list[bytes]) -> list[bytes]:
    """A request's spans' fields one by one: `SpanEncoder.request` joins them since h/otel4."""
    if isinstance(spans, list):
        return spans
    found, at = [], 0
    while at < len(spans):
        size, shift, start = 0, 0, at + 1  # the tag (0x12), then the length's varint
        while True:
            byte = spans[start]
            size |= (byte & 0x7F) << shift
            shift, start = shift + 7, start + 1
            if byte < 0x80:
                break
        found.append(spans[at : start + size])
        at = start + size
    return found


def _count_from_here() -> None:
    command = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while command.poll() is None:
        time.sleep(0.001)


def counted(folder: Path, piece: str, reps: int, src: Path | None, url: str) -> tuple[int, int]:
    """(instructions, records kept) of a child repeating `piece` `reps` times."""
    out = folder / f"{piece}-{reps}-{os.getpid()}.callgrind"
    env = environment()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(Path(__file__).parent)])
    argv = [*callgrind(out, at_start=False), sys.executable, str(Path(__file__).resolve()),
            "--child", piece, "--reps", str(reps), "--endpoint", url]  # fmt: skip
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return instructions(out), int(done.stdout.split()[-1])


def run(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.src:
        trees.insert(0, (args.src_name, args.src.resolve()))
    rows = []
    receiver = Receiver()
    try:
        for piece in PIECES:
            row: dict[str, Any] = {"piece": piece}
            for name, src in trees:
                (one, records), (two, _) = (counted(folder, piece, n, src, receiver.url)
                                            for n in (args.reps, 2 * args.reps))  # fmt: skip
                row[name] = (two - one) / (args.reps * (1 if piece == "export" else records))
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        receiver.shutdown()
        receiver.server_close()
    return rows


def markdown(data: dict[str, Any]) -> str:
    names = [k for k in data["rows"][0] if k != "piece"]
    lines = [
        f"# Instructions of tracing's pieces ({data['date']}, {data['machine']})", "",
        (f"`benchmarks/otel_pieces.py --reps {data['reps']}`: callgrind, (I(2R) - I(R)) / "
         "(R x records) over the (record, trace context) pairs of 64 requests through the "
         "gateway and the simulator, half streamed (module docstring): `path` the request "
         "path's tracing per request, `encode` its two spans' OTLP bytes, `export` one POST of "
         f"512 spans (per export). Load average {data['load_average']} at the end."), "",
        "| piece | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]  # fmt: skip
    lines += [f"| {row['piece']} | " + " | ".join(f"{row[n]:,.0f}" for n in names) + " |"
              for row in data["rows"]]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--src", type=Path, help="another tree's src/: counted too")
    parser.add_argument("--src-name", default="before")
    parser.add_argument("--child", choices=PIECES, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.reps, args.endpoint)
        return
    out = Output.of(args)
    if args.smoke:
        args.reps = 1
    with tempfile.TemporaryDirectory(prefix="levergate-otel-pieces-") as tmp:
        rows = run(args, Path(tmp))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data = {**stamp(), "reps": args.reps, "rows": rows, "load_average": load}
    out.write("otel_pieces", data, markdown(data))


if __name__ == "__main__":
    main()
