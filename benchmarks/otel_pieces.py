"""Instructions of tracing's pieces, counted by callgrind (issue 22 §3, log + OTel <= 1.1x):
what `otel_instructions.py` counts whole, split so a change to one piece can be measured alone.

A child process serves 64 requests (`--records`; whole and streamed, alternating) through the
gateway with the simulator in the process and tracing on, keeps the (record, trace context)
pairs the tracer got, then, with callgrind's instrumentation switched on, repeats each piece 2R
times over them:

- `path`: the request path's tracing work, as the gateway does it for a request: the trace
  context (`Spans.begin`; since 2026-12-05 `begin`), the attempt (`Spans.attempt`), the
  upstream's `traceparent` and its header dict (since 2026-12-05 both from `Spans.sent`), the
  attempt's end, the exporter's `export` (since 2026-12-04 the spans' encoding, before it the
  queue's append of the record);
- `encode`: `SpanEncoder.request`, the request's span and its attempt's, OTLP bytes;
- `export`: one POST of 512 encoded spans (`SpanExporter._send`) to a receiver in another
  process (HTTP/1.0: a connection each export), per export.

The first R repetitions warm the piece up; callgrind dumps its counts after them and again
after the next R (`--dump-before=getppid`: the child calls `os.getppid()` at each boundary,
nothing else in it does), so the second dump is R repetitions exactly: its instructions / (R x
records) are one request's (`export`: / R, one export's). One child counts every piece of a
tree. (Before 2026-12-05 two children a piece, repeating it R and 2R times, were counted whole,
I(2R) - I(R): the same repetitions, with the start of the counting in both; each child spent
most of its time starting Python under valgrind, and the smoke run's six of them took over 240
s on a slow 2-core CI machine. One tree counted both ways, `--reps 20`: within 0.4%.) The
receiver must have been sent every exported span: an export that failed would have been counted
quietly.

    python benchmarks/otel_pieces.py [--reps 20] [--src OTHER_TREE/src --src-name NAME]
    python benchmarks/otel_pieces.py --smoke   # 8 requests, R = 1

Writes benchmarks/results/otel_pieces.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp
from instructions import callgrind, count_from_here, environment, instructions
from otel_instructions import Receiver

PIECES = ("path", "encode", "export")
RECORDS = 64  # requests served before counting; each one's (record, spans) is kept
SMOKE_RECORDS = 8  # the smoke run's (half streamed, as in a full run)
BATCH = 512  # spans in the `export` piece's POST
# The C function whose every call has callgrind dump (and zero) its counts: the child calls it
# between the repetitions (`os.getppid()`), nothing else in the child does.
DUMP_AT = "getppid"


def child(pieces: list[str], reps: int, records: int, endpoint: str) -> None:
    asyncio.run(_child(pieces, reps, records, endpoint))


async def _child(pieces: list[str], reps: int, records: int, endpoint: str) -> None:
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
            for index in range(records):
                body = {**BODY, "stream": index % 2 == 1}
                await (await http.post("/chat/completions", json=body)).aread()
            await asyncio.sleep(0.1)  # the last record is made after the answer went out
            exporter.SpanExporter.export = export  # type: ignore[method-assign]
            tracer = next(
                t for t in gateway.recorder._tracers if isinstance(t, exporter.SpanExporter)
            )
            await _repeat(pieces, reps, kept, tracer)
            print(len(kept))
            os._exit(0)  # the close is not counted (nor needed)


async def _repeat(pieces: list[str], reps: int, kept: list[tuple[Any, Any]], tracer: Any) -> None:
    """Each piece `reps` times over the `kept` records, then `reps` times more, the
    instrumentation on and callgrind's counts dumped after each (module docstring)."""
    once = _pieces(kept, tracer)
    count_from_here()
    for piece in pieces:
        for _ in range(2):  # the warm-up, then the counted repetitions
            for _ in range(reps):
                await once[piece]()
            os.getppid()  # callgrind dumps here (DUMP_AT)


def _pieces(kept: list[tuple[Any, Any]], tracer: Any) -> dict[str, Callable[[], Awaitable[None]]]:
    """One repetition of each piece over the `kept` records, as the tree at hand calls it."""
    from levergate.core import spans as core_spans
    from levergate.core.spans import Spans

    encoder, base_ns = tracer._encoder, time.time_ns()
    # A request's spans in one `bytes` since 2026-12-05 (h/otel4), a list of them before.
    spans_bytes = [b for r, s in kept for b in _listed(encoder.request(r, s, base_ns))]
    batch = (spans_bytes * (1 + BATCH // len(spans_bytes)))[:BATCH]
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

    async def path() -> None:
        begin, end = core_spans.begin, core_spans.end  # type: ignore[attr-defined]
        for record, _ in kept:
            spans = begin(headers, 1.0, None, 1.0)
            sent = upstream.copy()
            attempt, sent["traceparent"] = spans.sent("sim", "sim-small", 1.0)
            del sent
            if attempt is not None:
                end(attempt)
            tracer.export(record, spans)
        if hasattr(tracer, "_held"):  # since 2026-12-05: held, encoded 32 at a time
            tracer.settle()
        tracer._queue.clear()
        if hasattr(tracer, "_counts"):  # since h/otel4: spans counted beside the queue
            tracer._counts.clear()
            tracer._spans = 0

    async def path_before() -> None:
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

    async def encode() -> None:
        for record, spans in kept:
            encoder.request(record, spans, base_ns)

    async def export() -> None:
        if hasattr(tracer, "_encoded"):  # the tree before
            tracer._encoded[:] = batch
        else:
            tracer._sending = list(batch)
            tracer._sending_spans = len(batch)  # since h/otel4 (no harm before)
        await tracer._send(None)

    return {"path": path if lists else path_before, "encode": encode, "export": export}


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


def counted(
    folder: Path, reps: int, records: int, src: Path | None, receiver: Receiver
) -> dict[str, float]:
    """Each piece's instructions per request (`export`: per export) in a child process."""
    out = folder / f"pieces-{len(list(folder.iterdir()))}.callgrind"
    env = environment()
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(Path(__file__).parent)])
    argv = [*callgrind(out, at_start=False), f"--dump-before={DUMP_AT}", sys.executable,
            str(Path(__file__).resolve()), "--child", ",".join(PIECES), "--reps", str(reps),
            "--records", str(records), "--endpoint", receiver.url]  # fmt: skip
    spans = receiver.spans
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    kept = int(done.stdout.split()[-1])
    sent = receiver.spans - spans
    if sent != 2 * reps * BATCH:  # the warm-up's exports and the counted ones
        raise RuntimeError(f"the receiver got {sent} spans, not {2 * reps * BATCH}")
    # out.1, out.2, ...: each piece's warm-up, then its counted repetitions.
    dumps = sorted(folder.glob(f"{out.name}.*"), key=lambda p: int(p.suffix[1:]))
    if len(dumps) != 2 * len(PIECES):
        raise RuntimeError(f"{len(dumps)} callgrind dumps, not {2 * len(PIECES)}: {dumps}")
    return {piece: instructions(dumps[2 * i + 1]) / (reps * (1 if piece == "export" else kept))
            for i, piece in enumerate(PIECES)}  # fmt: skip


def run(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.src:
        trees.insert(0, (args.src_name, args.src.resolve()))
    receiver = Receiver()
    try:
        found = {name: counted(folder, args.reps, args.records, src, receiver)
                 for name, src in trees}  # fmt: skip
    finally:
        receiver.shutdown()
        receiver.server_close()
    rows = [{"piece": piece, **{name: found[name][piece] for name, _ in trees}}
            for piece in PIECES]  # fmt: skip
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def markdown(data: dict[str, Any]) -> str:
    names = [k for k in data["rows"][0] if k != "piece"]
    lines = [
        f"# Instructions of tracing's pieces ({data['date']}, {data['machine']})", "",
        (f"`benchmarks/otel_pieces.py --reps {data['reps']}`: callgrind, the instructions of "
         "R repetitions after R more (module docstring) / (R x records), over the (record, "
         f"trace context) pairs of {data['records']} requests through the "
         "gateway and the simulator, half streamed: `path` the request "
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
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child.split(","), args.reps, args.records, args.endpoint)
        return
    out = Output.of(args)
    if args.smoke:
        args.reps, args.records = 1, SMOKE_RECORDS
    with tempfile.TemporaryDirectory(prefix="levergate-otel-pieces-") as tmp:
        rows = run(args, Path(tmp))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data = {
        **stamp(),
        "reps": args.reps,
        "records": args.records,
        "rows": rows,
        "load_average": load,
    }
    out.write("otel_pieces", data, markdown(data))


if __name__ == "__main__":
    main()
