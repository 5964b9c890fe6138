"""Where does tracing's CPU go that callgrind's instructions do not show? Issue 22 §3 (log + OTel
<= 1.1x the CPU of log-off): callgrind counted tracing at ~3.5-4% of a request's instructions
(otel_instructions.md) while process CPU measured it at ~9.6% (otel_ab.md). Instructions miss
what the kernel does for the process (page faults, the export's socket, wake-ups) and what an
instruction costs (a cache miss: the garbage collector walking objects held for the export).

Each side runs `otel_ab.py`'s path (httpx over `GatewayTransport`, the gateway, the simulator in
one process; tracing exports to a receiver in another process) in its own child process, off and
otel alternating, and counts per request, between the end of the warm-up and the gateway's
close (its export of what is queued included):

- the garbage collector's collections by generation and the objects they freed (`gc.callbacks`),
  the thread CPU spent in them (`time.thread_time` around each: indicative), and the objects
  it tracks at the end (what a full collection walks);
- `getrusage`: user and system CPU, minor page faults, voluntary and involuntary context switches;
- with `--tracemalloc` (a separate run: it slows everything): the peak of traced memory.

The counts of collections, faults and switches do not move much with the machine's load; the
CPU figures do (indicative only on a shared host: the load average is written beside them).

    python benchmarks/otel_where.py [--rounds 3] [--requests 3000] [--sides off,otel]
        [--sides off,log --name log_where]   # the request log's: the same counts
        [--tracemalloc] [--src OTHER_TREE/src --src-name NAME [--src-side log]]  # its otel
                                                           # (or log) side too
    python benchmarks/otel_where.py --smoke

Writes benchmarks/results/otel_where.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp
from otel_ab import receiving

HERE = Path(__file__).resolve().parent
KINDS = ("whole", "stream")
FIELDS = (  # (key, what it is), per request
    ("cpu_us", "process CPU us"),
    ("user_us", "user CPU us"),
    ("sys_us", "system CPU us"),
    ("gc_us", "CPU us in gc"),
    ("gc0_us", "CPU us in gen0 collections"),
    ("gc1_us", "CPU us in gen1 collections"),
    ("gc2_us", "CPU us in gen2 collections"),
    ("gc0", "gen0 collections /1k req"),
    ("gc1", "gen1 collections /1k req"),
    ("gc2", "gen2 collections /1k req"),
    ("collected", "objects freed by gc"),
    ("tracked", "objects tracked by gc at the end"),
    ("minflt", "minor faults"),
    ("nvcsw", "voluntary switches"),
    ("nivcsw", "involuntary switches"),
    ("wchar", "bytes passed to write calls"),
    ("syscw", "write calls"),
    ("rchar", "bytes passed to read calls"),
)


def process_io() -> dict[str, int]:
    """The process's I/O counts (`/proc/self/io`: bytes passed to read and write calls, the
    calls; 0 where there is none)."""
    path = Path("/proc/self/io")
    if not path.exists():
        return {"wchar": 0, "syscw": 0, "rchar": 0}
    pairs = (line.partition(":") for line in path.read_text().splitlines())
    return {key: int(value) for key, _, value in pairs}


class GcCount:
    """Collections by generation, the objects they freed, and the thread CPU inside them,
    from `gc.callbacks`."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.collected = 0
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collections[info["generation"]] += 1
            self._started = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._started
            self.collected += info["collected"]


async def measure(requests: int, *, stream: bool, endpoint: str | None,
                  tracemalloc_on: bool, log: str | None = None) -> dict[str, float]:  # fmt: skip
    from inprocess_cpu import BODY, served
    from otel_ab import side_settings

    count = GcCount()
    make = functools.partial(side_settings, endpoint=endpoint, log=log)
    async with served(make, {**BODY, "stream": stream}, warmup=min(300, requests)) as one:
        if tracemalloc_on:
            import tracemalloc

            tracemalloc.start()
        gc.callbacks.append(count)
        before = resource.getrusage(resource.RUSAGE_SELF)
        io_before = process_io()
        started = time.process_time()
        for _ in range(requests):
            await one()
    cpu = time.process_time() - started  # the close's export included
    after = resource.getrusage(resource.RUSAGE_SELF)
    io_after = process_io()
    gc.callbacks.remove(count)
    found = {
        "cpu_us": cpu * 1e6 / requests,
        "user_us": (after.ru_utime - before.ru_utime) * 1e6 / requests,
        "sys_us": (after.ru_stime - before.ru_stime) * 1e6 / requests,
        "gc_us": sum(count.seconds) * 1e6 / requests,
        "collected": count.collected / requests,
        "tracked": len(gc.get_objects()),
        "minflt": (after.ru_minflt - before.ru_minflt) / requests,
        "nvcsw": (after.ru_nvcsw - before.ru_nvcsw) / requests,
        "nivcsw": (after.ru_nivcsw - before.ru_nivcsw) / requests,
        **{k: (io_after[k] - io_before[k]) / requests for k in ("wchar", "syscw", "rchar")},
    }
    found.update((f"gc{g}", count.collections[g] * 1000 / requests) for g in range(3))
    found.update((f"gc{g}_us", count.seconds[g] * 1e6 / requests) for g in range(3))
    if tracemalloc_on:
        import tracemalloc

        found["peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
        tracemalloc.stop()
    return found


def fill_log(path: str, records: int) -> None:
    """A log grown to `records` records before the run, ids drawn as this tree's gateway draws
    them (core/ids.py): what a gateway's log holds after a while (the default bound, 1 GiB,
    holds millions), where each new record's index entries land matters."""
    from levergate.core.ids import fresh_id
    from levergate.layers.measure.record import RequestRecord, Timings, Tokens
    from levergate.requestlog.row import row_of
    from levergate.requestlog.store import SqliteLog

    template = RequestRecord(
        request_id="", kind="chat", tenant=None, feature="default", model="fast", alias="fast",
        upstream="sim", upstream_model="fast-1", outcome="ok", status=200, error=None,
        timings=Timings(total=0.02, upstream=0.018, overhead=0.001, ttft=None),
        tokens=Tokens(120, 0, 0, 30), cost_usd=0.0001,
    )  # fmt: skip
    store = SqliteLog(path, timeout_seconds=5.0, batch_size=500)
    start = time.time() - records * 0.01
    for at in range(0, records, 500):
        store.write([row_of(start + n * 0.01, template._replace(request_id=fresh_id()))
                     for n in range(at, min(records, at + 500))])  # fmt: skip
    store.close()


def child(requests: int, endpoint: str | None, tracemalloc_on: bool, log: bool,
          log_fill: int = 0) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        result = {}
        for kind in KINDS:
            path = str(Path(folder) / f"{kind}.sqlite")
            if log and log_fill:
                fill_log(path, log_fill)
            result[kind] = asyncio.run(measure(
                requests, stream=kind == "stream", endpoint=endpoint,
                tracemalloc_on=tracemalloc_on, log=path if log else None,
            ))  # fmt: skip
    print(json.dumps(result))


def run_child(requests: int, endpoint: str | None, tracemalloc_on: bool, src: Path | None = None,
              *, log: bool = False, log_fill: int = 0) -> dict[str, Any]:  # fmt: skip
    argv = [sys.executable, __file__, "--child", "--requests", str(requests),
            "--log-fill", str(log_fill)]  # fmt: skip
    if endpoint:
        argv += ["--endpoint", endpoint]
    if log:
        argv.append("--log")
    if tracemalloc_on:
        argv.append("--tracemalloc")
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE)])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument(
        "--sides", default="off,otel",
        help="of off, otel, log, log+otel (the request log on, in SQLite)",
    )  # fmt: skip
    parser.add_argument("--name", default="otel_where", help="the results' file name")
    parser.add_argument("--tracemalloc", action="store_true", help="the peak of traced memory")
    parser.add_argument("--note", default="", help="a sentence for the results' head")
    parser.add_argument("--src", type=Path, help="another tree's src/: its otel side too")
    parser.add_argument("--src-name", default="before")
    parser.add_argument("--src-side", choices=("otel", "log"), default="otel",
                        help="which side runs on --src's tree too")  # fmt: skip
    parser.add_argument("--log-fill", type=int, default=0,
                        help="records in a log before its run")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log", action="store_true", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.requests, args.endpoint, args.tracemalloc, args.log, args.log_fill)
        return
    out = Output.of(args)
    if args.smoke:
        args.rounds, args.requests = 1, 50
    sides = args.sides.split(",")
    trees: dict[str, Path | None] = dict.fromkeys(sides)
    if args.src is not None:
        trees[f"{args.src_name}: {args.src_side}"] = args.src.resolve()
    sides = list(trees)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with receiving() as endpoint:
        for _ in range(args.rounds):
            for side, src in trees.items():
                runs[side].append(run_child(args.requests, endpoint if "otel" in side else None,
                                            args.tracemalloc, src, log="log" in side,
                                            log_fill=args.log_fill))  # fmt: skip
    report(runs, sides, args, out)


def report(runs: dict[str, list[dict[str, Any]]], sides: list[str], args: argparse.Namespace,
           out: Output) -> None:  # fmt: skip
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data: dict[str, Any] = {**stamp(), "rounds": args.rounds, "requests": args.requests,
                            "load_average": load, "runs": runs}  # fmt: skip
    fields = list(FIELDS) + ([("peak_kib", "traced peak KiB")] if args.tracemalloc else [])
    lines = [
        f"# Where tracing's and the request log's CPU goes ({data['date']}, {data['machine']})",
        "",
        (f"`benchmarks/otel_where.py --rounds {args.rounds} --requests {args.requests}"
         f" --sides {args.sides}{' --tracemalloc' if args.tracemalloc else ''}`: the "
         "in-process path (httpx, gateway, simulator in one process; tracing exports to a "
         "receiver in another process, the request log writes to SQLite), sides "
         "alternating, each in its own process; medians of the rounds, per "
         "request (collections per 1,000 requests) from the warm-up's end to the gateway's "
         "close. CPU figures indicative (a shared host). "
         f"Load average {load} at the end. {args.note}").rstrip(), "",
        "| kind | measure | " + " | ".join(sides) + " | " + " | ".join(
            f"{side} - {sides[0]}" for side in sides[1:]) + " |",
        "|---|---|" + "---:|" * (2 * len(sides) - 1),
    ]  # fmt: skip
    for kind in KINDS:
        data[kind] = {}
        for key, what in fields:
            median = {s: statistics.median(r[kind][key] for r in runs[s]) for s in sides}
            data[kind][key] = median
            cells = [f"{median[s]:,.2f}" for s in sides]
            cells += [f"{median[s] - median[sides[0]]:+,.2f}" for s in sides[1:]]
            lines.append(f"| {kind} | {what} | " + " | ".join(cells) + " |")
    out.write(args.name, data, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
