"""Instructions per request, counted by valgrind's callgrind (issues 22 and 23 §1): on a
machine shared by several sessions, CPU time per request moves by more than the effects being
measured (±100 us against 5%), while the instructions a request executes do not depend on the
load. Two A/Bs, each by differencing: the same process set-up serving N and then 2N requests
after the same warm-up, so start-up, warm-up and shutdown cancel and (I(2N) - I(N)) / N is one
request's instructions.

1. The request log off and on (issue 23 §1: at most 1.05x), in-process: `levergate.bench.calls`'
   path (the httpx client over `GatewayTransport`, an upstream answering from memory, no other
   process), whole and streamed, with the features the settings turn on (as `build_gateway`
   adds them). Every thread of the process is counted from the end of the warm-up to its exit
   (`PYTHONHASHSEED=0`: the count repeats to ~0.1%). "On" counts everything the log does: the
   append on the request path, building the rows, SQLite inserting and indexing them (the
   writer's thread), and the close writing what is still queued; each run checks the log then
   holds every record. The warm-up and N are one batch (500): every statement size is compiled
   in the warm-up, as in a log that has run a while. Callgrind runs the code ~50x slower, and a
   loaded machine stretches that again by a varying factor, so nothing counted may depend on
   the wall clock (benchmark-only settings, the same on both sides): the log writes when a
   batch is full and at the close, never on its flush or prune timer (`flush_seconds` and
   `prune_seconds` out of reach: with the flush at 60 s a stretched run wrote part-batches,
   whose statements of new sizes SQLite compiled in the count), a turn of the event loop
   builds 50 rows (`writer.TURN_CLOCK` counts rows: on the wall clock, as at full speed, a
   turn built fewer rows the slower the run), the store's timeout is 600 s, and the prompt
   cache's prefix linter is off (it compares one request per second of wall time: at full
   speed one in ~1,500, under callgrind one in ~30, counted in "off" and "on" alike). What
   remains is the request ids (random: where they land in the index) and when the GIL passes
   between the loop and the writer's thread: the same code counted within 0.25% (whole) and
   0.05% (stream) in two runs at loads 7-18 (instructions.md's off columns). Split by library
   with `--keep` and callgrind_annotate. A row's kind `whole@K` (`--log-rows
   simulator:whole@100`) fires the log's flush timer every K records instead (`timer_every`: a
   count, not a clock), so the log writes part-batches as under lighter traffic. Each row also
   counts the GIL's releases a request (`gil_releases`: calls of `PyEval_SaveThread`, all and
   CPython's sqlite3 module's), what the writer's thread hands over to a busy event loop.
2. levergate's default proxy path against the bare relay (`bare_relay.py`; issue 22: at most
   1.1x the CPU per request), each its own process under callgrind, in front of one
   `levergate sim` (0 ms, not counted) and loaded by an asyncio client on loopback with 1 and
   16 connections: distinct chat requests, so the exact cache misses, whole (and, with
   `--relay-kinds whole,stream`, streamed). Kind `hit` (`--relay-kinds hit`) counts exact-cache
   hits instead: the same request every time (temperature 0), so after the warm-up's first
   request every one is answered from levergate's cache, against the simulator's own
   instructions for answering it (a second `levergate sim` under callgrind, loaded the same
   way): the relay caches nothing, and a hit's goal is the direct round trip's (issue 22 §3:
   a hit <= 1.5x a client's round trip to the simulator). Counting is
   switched on after the warm-up (`callgrind_control -i on`), so the servers' start-up runs
   uninstrumented; the servers' idle ticks during the run (uvicorn's 0.1 s tick, levergate's
   timers), which callgrind's slowdown stretches, are in both counts and measured separately.

Callgrind counts user-space instructions: a system call's kernel work (socket reads and
writes, epoll, futex wake-ups between threads, SQLite's fsync) is not in them. With
`--cache-sim` (and `--branch-sim`) the log A/B simulates the caches (a core of this host's:
`cachesim.CACHES`) and the branch predictor too: each side's misses a request, an estimate of
its cycles (`cachesim.cest`: Ir + 10 L1 misses + 100 LL misses + 10 mispredictions), and the
log's share (on less off) by category (SQLite's layers, sqlite3, malloc, the collector, the
interpreter) and by function (h/logmem: why the log's instructions cost more than the rest's).
`--log-tree NAME=SRC` (repeatable) adds a side with the log on in another tree's src/ (the base
tree, or a copy with one lever changed), counted in the same run. `--collect observe` counts
only inside `LogWriter.observe` (callgrind's collection toggled around it by a client request,
the caches simulated all along): the log's request-path share in place, its misses those of
the running gateway (the rest of the log's share is the whole's less it). Where the kernel's
work matters, CPU time on a quiet machine still has the last word.

    python benchmarks/instructions.py [--requests 500] [--warmup 500] [--only log|relay]
        [--before OLD.json --before-name NAME] [--merge OTHER_PART.json] [--keep FOLDER]
        [--baseline OTHER_TREE/src --baseline-name NAME]   # a third server in the relay A/B
        [--relay-kinds whole,stream,hit] [--connections 1,16] [--name instructions]
        [--cache-sim] [--branch-sim] [--log-tree NAME=SRC ...] [--parallel 2]
        [--collect all|observe]
    python benchmarks/instructions.py --smoke

Writes benchmarks/results/instructions.{json,md} (`--name`: another name).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import cachesim
from harness import Output, add_output_options, free_port, need_tool, stamp, wait_port

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
WAYS = ("inprocess", "http", "simulator")
# The log A/B's rows: (way, kind).
LOG_ROWS = (("inprocess", "whole"), ("inprocess", "stream"), ("simulator", "whole"))
KINDS = ("whole", "stream")
BODY = {"model": "sim-small", "max_tokens": 16}
# Kind `hit`'s request: the same each time, deterministic (temperature 0), so the exact cache
# answers every one after the first.
SAME = {**BODY, "temperature": 0, "messages": [{"role": "user", "content": "the same question"}]}
# Instructions per second, callgrind against the same code at full speed: ~50x.
SLOWDOWN = 50
ROWS_PER_TURN = 50  # the log's rows built per turn of the event loop at full speed (~10 us each)
# Benchmark-only settings of the log (module docstring): no timer of its own fires.
NO_LOG_TIMERS = {"flush_seconds": 1e9, "prune_seconds": 1e9}
START_SECONDS = 600  # a server's start-up under valgrind (uninstrumented, still ~5x slower)


def callgrind(out: Path, *, at_start: bool = True, sim: tuple[str, ...] = ()) -> list[str]:
    """valgrind's command line; `sim`: callgrind's simulations too (`cache`, `branch`)."""
    caches = cachesim.CACHES if "cache" in sim else ()
    return [need_tool("valgrind"), "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--instr-atstart={'yes' if at_start else 'no'}",
            *(f"--{s}-sim=yes" for s in sim), *caches]  # fmt: skip


def instructions(out: Path) -> int:
    """The total instructions of a callgrind output file (its `summary:` or `totals:`)."""
    return cachesim.events(out)["Ir"]


def gil_releases(out: Path) -> dict[str, int]:
    """How many times the counted threads gave the GIL up (calls of `PyEval_SaveThread`: a
    `Py_BEGIN_ALLOW_THREADS`), in all and by CPython's sqlite3 module (its callers in
    `_sqlite3`'s shared object): where another thread waits for it, each is a hand-over
    through the operating system, and one back when the releasing thread wants it again."""
    name = cachesim.Names()
    total = sqlite = 0
    obj = callee = ""
    with out.open() as lines:
        for line in lines:
            if line.startswith("ob="):
                obj = name("ob", line[3:].strip())
            elif line.startswith("cob="):
                name("ob", line[4:].strip())  # learns the name; the caller's object stays
            elif line.startswith("fn="):
                name("fn", line[3:].strip())
            elif line.startswith("cfn="):
                callee = name("fn", line[4:].strip())
            elif line.startswith("calls=") and callee == "PyEval_SaveThread":
                count = int(line[6:].split()[0])
                total += count
                sqlite += count if "_sqlite3" in obj else 0
    return {"gil_releases": total, "gil_releases_sqlite3": sqlite}


def environment() -> dict[str, str]:
    """This process's environment with a fixed hash seed (dict and set layouts, hence the
    instructions, repeat from run to run)."""
    return {**os.environ, "PYTHONHASHSEED": "0"}


# ---- 1. the request log, in-process ------------------------------------------------------------


def child(args: argparse.Namespace, **more: Any) -> None:
    """The workload a counted child process runs: `--warmup` then `--requests` requests, with
    the settings `more` adds (otel_instructions.py: tracing); with the log on, it prints the
    records the log holds after the close."""
    from levergate.bench.calls import serve_requests

    # The linter samples by the wall clock (module docstring), so it is off on both sides.
    values: dict[str, Any] = {"prompt_cache": {"lint": {"enabled": False}}, **more}
    if args.request_log:
        no_log_timers()
        if getattr(args, "log_timer", 0):  # otel_instructions.py's arguments have none
            timer_every(args.log_timer)
        if getattr(args, "marks", None):
            from log_breakdown import collect_in_observe

            collect_in_observe(Path(args.marks))
        values["request_log"] = {"enabled": True,
                                 "store": {"sqlite_path": args.request_log,
                                           "timeout_seconds": 600}}  # fmt: skip
    stream = args.kind == "stream"
    if args.way == "simulator":
        asyncio.run(with_simulator(stream=stream, requests=args.requests, warmup=args.warmup,
                                   **values))  # fmt: skip
    else:
        asyncio.run(serve_requests(_CountFromHere(), stream=stream, requests=args.requests,
                                   warmup=args.warmup, way=args.way, features=True,
                                   **values))  # fmt: skip
    if args.request_log:
        with contextlib.closing(sqlite3.connect(args.request_log)) as conn:
            print(conn.execute("SELECT COUNT(*) FROM lg_requests").fetchone()[0])


def no_log_timers() -> None:
    """The log writes full batches and at the close only, `ROWS_PER_TURN` rows a turn: each
    `LogWriter` gets `NO_LOG_TIMERS` over its settings (which bound `flush_seconds` to 60),
    and its turns are timed by a clock that advances by one row's share of a turn per call."""
    from levergate.requestlog import writer

    writer.TURN_CLOCK = functools.partial(next, itertools.count(0.0, writer.TURN_SECONDS
                                                                 / ROWS_PER_TURN))  # fmt: skip
    init = writer.LogWriter.__init__

    def without_timers(self: Any, store: Any, *, settings: Any, **rest: Any) -> None:
        init(self, store, settings=settings.model_copy(update=NO_LOG_TIMERS), **rest)

    writer.LogWriter.__init__ = without_timers  # type: ignore[method-assign]


def timer_every(records: int) -> None:
    """The log's flush timer, fired by a count of records instead of `flush_seconds` (which
    `no_log_timers` put out of reach): every `records` records observed wake the job as the
    timer does (a timer of T seconds at a steady R requests a second: `records` = R T), so it
    writes part-batches, as a log under light or moderate traffic does. Where the job tells a
    full batch's wake from the timer's (`LogWriter._wait`), the timer's is reported as such.
    The wrapper is a Python frame a request, on the log's side only (counted in "on")."""
    from levergate.requestlog import writer

    observe = writer.LogWriter.observe
    seen = itertools.count(1)
    fired: set[int] = set()

    def observed(self: Any, record: Any, call: Any, about: Any) -> None:
        observe(self, record, call, about)
        if next(seen) % records == 0:
            fired.add(id(self))
            self._wake.set()

    writer.LogWriter.observe = observed  # type: ignore[method-assign]
    if hasattr(writer.LogWriter, "_wait"):  # code before 2026-12-04 had none

        async def wait(self: Any) -> bool:
            await self._wake.wait()
            self._wake.clear()
            timer = id(self) in fired
            fired.discard(id(self))
            return timer

        writer.LogWriter._wait = wait  # type: ignore[method-assign]


async def with_simulator(*, stream: bool, requests: int, warmup: int, **values: Any) -> None:
    """`inprocess_cpu.py`'s workload, the issue's measure of the log's cost: the httpx client
    over `GatewayTransport`, `build_gateway`'s gateway and the simulator, all in this process,
    the same request each time (no temperature: the exact cache lets it through)."""
    import httpx
    from inprocess_cpu import BODY as SAME

    from levergate import Settings
    from levergate.app import build_gateway
    from levergate.server.transport import GatewayTransport
    from levergate.simulator import SimSettings, run_simulator

    async with run_simulator(SimSettings(port=0)) as sim:
        gateway = build_gateway(Settings.for_upstream(sim.base_url, **values))
        transport = GatewayTransport(gateway)
        async with gateway, httpx.AsyncClient(transport=transport, base_url="http://lg/v1") as http:
            body = {**SAME, "stream": stream}
            for _ in range(warmup):
                await (await http.post("/chat/completions", json=body)).aread()
            with _CountFromHere():
                for _ in range(requests):
                    await (await http.post("/chat/completions", json=body)).aread()


def count_from_here() -> None:
    """Switches callgrind's instrumentation on for this process (it runs with
    `--instr-atstart=no`: start-up and warm-up at ~3x the speed instead of ~50x slower), the heap
    built so far frozen first, running Python while `callgrind_control` waits for the process to
    take its command.

    The heap the start-up and warm-up built is frozen (collected once, then out of every later
    collection's reach): a full collection traverses the whole heap, ~15M instructions here, and
    one falls in a counted window or not by when the allocations of that side's requests crossed
    the threshold, not by the work of the requests (the log on counted 1.111x and 1.116x its off
    side, 1.082x frozen; the off side moved by 0.1%). Collections of what the counted requests
    allocate are still counted."""
    gc.collect()
    gc.freeze()
    command = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while command.poll() is None:
        time.sleep(0.001)
    if command.returncode != 0:
        raise RuntimeError("callgrind_control could not switch the instrumentation on")


class _CountFromHere(contextlib.AbstractContextManager[None]):
    """`count_from_here` as the context the counted requests are served in."""

    def __enter__(self) -> None:
        count_from_here()

    def __exit__(self, *exc: object) -> None:
        return None


def counted_child(folder: Path, name: str, *, requests: int, warmup: int, way: str, kind: str,
                  log: bool, sim: tuple[str, ...] = (), tree: Path | None = None,
                  marks: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The run's instructions and GIL releases (`gil_releases`), with `sim` every event
    (`events`). `kind`: whole or stream, with `@K` (`whole@100`) the log's timer fired every
    K records (`timer_every`); `tree`: another tree's src/ (`--log-baseline`)."""
    out = folder / f"{name}.callgrind"
    kind, _, every = kind.partition("@")
    collect = ["--collect-atstart=no"] if marks else []
    argv = [*callgrind(out, at_start=False, sim=sim), *collect, sys.executable,
            str(Path(__file__).resolve()),
            "--child", "--way", way, "--kind", kind, "--requests", str(requests),
            "--warmup", str(warmup)]  # fmt: skip
    if log:
        argv += ["--request-log", str(folder / f"{name}.sqlite3")]
        argv += ["--log-timer", every] if every else []
        argv += ["--marks", str(marks)] if marks else []
    env = {**environment(), **({"PYTHONPATH": str(tree)} if tree else {})}
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    if log and int(done.stdout.split()[-1]) != warmup + requests:
        raise RuntimeError(f"{name}: the log holds {done.stdout.split()[-1]} records, not "
                           f"{warmup + requests}: it did not write them all")  # fmt: skip
    found: dict[str, Any] = {"instructions": instructions(out), **gil_releases(out)}
    if sim:
        found["events"] = cachesim.events(out)
        found["functions"] = cachesim.by_function(out)
    return found


def per_request(counts: Mapping[str, int], name: str, requests: int) -> float:
    """(I(2N) - I(N)) / N, from the runs named `name`-N and `name`-2N."""
    return (counts[f"{name}-{2 * requests}"] - counts[f"{name}-{requests}"]) / requests


def counted_all(runs: Mapping[str, Callable[[], T]], parallel: int) -> dict[str, T]:
    """Each named run's count(s), `parallel` runs at a time."""
    with ThreadPoolExecutor(parallel) as pool:
        futures = {name: pool.submit(run) for name, run in runs.items()}
        return {name: future.result() for name, future in futures.items()}


def log_ab(folder: Path, requests: int, warmup: int, which: tuple[tuple[str, str], ...],
           parallel: int, *, sim: tuple[str, ...] = (),
           trees: Mapping[str, Path] | None = None,
           marks: Path | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each row's off and on sides (and one a tree of `trees`, the log on in that tree's src/,
    by its name), with `sim` each side's events a request and the log's split by category."""
    trees = trees or {}
    sides = ("off", "on", *trees)
    rows = []
    for way, kind in which:
        runs = {
            f"{side}-{n}": functools.partial(
                counted_child, folder, f"log-{way}-{kind.replace('@', '-t')}-{side}-{n}",
                requests=n, warmup=warmup, way=way, kind=kind, log=side != "off", sim=sim,
                tree=trees.get(side), marks=marks)
            for side in sides for n in (requests, 2 * requests)
        }  # fmt: skip
        counts = counted_all(runs, parallel)
        row: dict[str, Any] = {"way": way, "kind": kind}
        for field, prefix in (("instructions", ""), ("gil_releases", "gil_"),
                              ("gil_releases_sqlite3", "gil_sqlite3_")):  # fmt: skip
            of = {name: found[field] for name, found in counts.items()}
            row.update((f"{prefix}{side}", per_request(of, side, requests)) for side in sides)
        row["ratio"] = row["on"] / row["off"] if row["off"] else float("nan")
        row.update((f"{side}_ratio", row[side] / (row["off"] or float("nan"))) for side in trees)
        if sim:
            row.update(cache_split(counts, sides, requests))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("split")}), flush=True)
    return rows


def cache_split(counts: Mapping[str, Any], sides: tuple[str, ...],
                requests: int) -> dict[str, Any]:  # fmt: skip
    """Each side's events a request (`events_<side>`, `CEst` among them), and each logging
    side's less off's by category (`split_<side>`) and by function (`split_fn_<side>`, the 40
    largest in estimated cycles either way)."""
    found: dict[str, Any] = {}
    split: dict[str, tuple[dict[str, dict[str, float]], ...]] = {}
    for side in sides:
        big, small = counts[f"{side}-{2 * requests}"], counts[f"{side}-{requests}"]
        each = {e: (big["events"][e] - small["events"][e]) / requests for e in big["events"]}
        found[f"events_{side}"] = {**each, "CEst": cachesim.cest(each)}
        split[side] = tuple(cachesim.per_request(big["functions"], small["functions"], requests,
                                                 key=key)
                            for key in (cachesim.category, cachesim.function))  # fmt: skip
    for side in sides[1:]:
        found[f"split_{side}"] = cachesim.minus(split[side][0], split["off"][0])
        by_fn = cachesim.minus(split[side][1], split["off"][1])
        found[f"split_fn_{side}"] = {k: by_fn[k] for k in cachesim.top(by_fn, "CEst", 40)}
    return found


# ---- 2. levergate against the bare relay, over HTTP --------------------------------------------


async def load(port: int, requests: int, connections: int, first: int, *,
               stream: bool = False, same: bool = False) -> None:  # fmt: skip
    """`requests` distinct chat requests (numbered from `first`) over `connections` keep-alive
    connections, each answered before its connection sends the next; `stream`: streamed, each
    read to its last chunk; `same`: `SAME` every time instead (whole)."""
    numbers = iter(range(first, first + requests))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for n in numbers:
                messages = [{"role": "user", "content": f"hi {n}"}]
                body = json.dumps(SAME if same else {**BODY, **({"stream": True} if stream
                                  else {}), "messages": messages})  # fmt: skip
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                             b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body.encode()))  # fmt: skip
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"answered {head.splitlines()[0]!r}")
                if stream:
                    if b"transfer-encoding: chunked" not in head.lower():
                        raise RuntimeError("a stream answered without chunked framing")
                    await reader.readuntil(b"\r\n0\r\n\r\n")
                    continue
                size = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                if size is None:
                    raise RuntimeError("an answer without content-length")
                await reader.readexactly(int(size.group(1)))
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))


def server_command(target: str, port: int, upstream: str) -> list[str]:
    if target == "simulator":
        return [*LEVERGATE, "sim", "--port", str(port), "--ttft-ms", "0"]
    if target == "relay":
        return [sys.executable, str(HERE / "bare_relay.py"), "--port", str(port),
                "--upstream", upstream]  # fmt: skip
    return [*LEVERGATE, "serve", "--upstream", upstream + "/v1", "--port", str(port)]


def counted_server(folder: Path, target: str, upstream: str, *, requests: int, warmup: int,
                   connections: int, idle: float = 0.0, kind: str = "whole",
                   env: Mapping[str, str] | None = None) -> int:  # fmt: skip
    """The instructions `target` executes serving `requests` after `warmup` (uncounted), with
    `idle` seconds of nothing before they start, up to its exit on SIGTERM; `env` over this
    process's environment (a baseline's `PYTHONPATH`). `kind`: whole, stream, or hit (`SAME`
    every time)."""
    port = free_port()
    stream, same = kind == "stream", kind == "hit"
    out = folder / (f"{target.replace(' ', '-')}-{kind}-c{connections}-{requests}-{idle:g}"
                    ".callgrind")  # fmt: skip
    proc = subprocess.Popen([*callgrind(out, at_start=False), *server_command(target, port,
                            upstream)], env={**environment(), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(port, seconds=START_SECONDS, proc=proc)
        asyncio.run(load(port, warmup, connections, first=0, stream=stream, same=same))
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        time.sleep(idle)
        asyncio.run(load(port, requests, connections, first=warmup, stream=stream, same=same))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=START_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return instructions(out)


def relay_ab(folder: Path, requests: int, warmup: int, *, connections: tuple[int, ...],
             idle: float, parallel: int, kinds: tuple[str, ...] = ("whole",),
             baseline: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """`baseline`: another tree's `src/`, served as a third target ("levergate baseline");
    each N's runs of every target are started together, so levergate and its baseline run
    at the same load (the servers' wall-clock timers are in the counts). Kind `hit` compares
    with the simulator answering the same request instead of the relay."""
    need_tool("callgrind_control")
    levergates = ("levergate", *(("levergate baseline",) if baseline else ()))
    envs = {"levergate baseline": {"PYTHONPATH": str(baseline)}} if baseline else {}
    sim_port = free_port()
    sim = subprocess.Popen([*LEVERGATE, "sim", "--port", str(sim_port), "--ttft-ms", "0"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    upstream = f"http://127.0.0.1:{sim_port}"
    rows: list[dict[str, Any]] = []
    ticks: dict[str, float] = {}
    try:
        wait_port(sim_port, proc=sim)
        for kind, c in itertools.product(kinds, connections):
            against = "simulator" if kind == "hit" else "relay"
            targets = (against, *levergates)
            runs = {f"{target}-{n}": functools.partial(
                        counted_server, folder, target, upstream, requests=n, warmup=warmup,
                        connections=c, kind=kind, env=envs.get(target))
                    for n in (requests, 2 * requests)
                    for target in targets}  # fmt: skip
            counts = counted_all(runs, max(parallel, len(targets)))
            row: dict[str, Any] = {"connections": c, "kind": kind,
                                   **{target: per_request(counts, target, requests)
                                      for target in targets}}  # fmt: skip
            row["ratio"] = row["levergate"] / row[against]
            if baseline:
                row["baseline_ratio"] = row["levergate baseline"] / row[against]
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
        if idle:
            runs = {f"{target}-{s:g}": functools.partial(
                        counted_server, folder, target, upstream, requests=1, warmup=warmup,
                        connections=1, idle=s)
                    for target in ("relay", "levergate") for s in (0.0, idle)}  # fmt: skip
            counts = counted_all(runs, parallel)
            ticks = {target: (counts[f"{target}-{idle:g}"] - counts[f"{target}-0"]) / idle
                     for target in ("relay", "levergate")}  # fmt: skip
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=30)
    return {"rows": rows, "idle_instructions_per_second": ticks}


# ---- the run -----------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Instructions per request, counted by callgrind ({data['date']}, {data['machine']})",
        "",
        ("`benchmarks/instructions.py`: each figure is (I(2N) - I(N)) / N, user-space "
         "instructions of the whole process (every thread) serving 2N and N requests after the "
         "same warm-up."),
    ]  # fmt: skip
    if data["requests"] is not None:
        lines.append(f"This run: N = {data['requests']} after {data['warmup']} warm-up "
                     f"requests, load average {data['load_average']} at the end.")  # fmt: skip
    lines += [
        (f"With the rows of the run of {run['date']}: N = {run['requests']} after "
         f"{run['warmup']} warm-up requests, load average {run['load_average']}.")
        for run in data.get("merged") or []
    ]  # fmt: skip
    before = data.get("before") or {}
    if data.get("collect") == "observe":
        lines.append("Counted inside `LogWriter.observe` only (`--collect observe`; off: none, "
                     "on: the request path's share of the log, and the toggles' ctypes calls, "
                     "two GIL releases a request).")  # fmt: skip
    if data["log"]:
        lines += log_table(data["log"], before.get("log") or [], before.get("name"))
        lines += cachesim.markdown(data["log"], ("off", "on", *data.get("log_trees", ())))
    if data["relay"]:
        lines += relay_table(data["relay"], before.get("relay") or {}, before.get("name"))
    return "\n".join(lines) + "\n"


def log_table(rows: list[dict[str, Any]], old: list[dict[str, Any]], name: str | None) -> list[str]:
    lines = ["", ("The request log off and on, in-process: `inprocess` is `levergate.bench.calls`' "
             "path (the httpx client over `GatewayTransport`, an upstream answering from "
             "memory, distinct requests), `simulator` is `inprocess_cpu.py`'s workload (the "
             "same, with the simulator in the process and the same request each time: the "
             "issue's measure). Target (issue 23): on / off <= 1.05x. Nothing counted depends "
             "on the wall clock (benchmark-only settings, the same on both sides: the log "
             "writes full batches and at the close, 50 rows a turn of the event loop; the "
             "prefix linter off; see the module's docstring), so two runs of the same code "
             "agree (compare an off column before and after); the warm-up's heap is frozen "
             "before counting (a full collection falls in a counted window or not by chance)."),
             ""]  # fmt: skip
    lines += [("A kind `whole@K` fires the log's flush timer every K records instead of "
               "never (`timer_every`): the part-batches of a log under lighter traffic. GIL "
               "releases: calls of `PyEval_SaveThread` a request, every thread (and, on, "
               "those of CPython's sqlite3 module): each one the writer's thread makes while "
               "the event loop is busy is a hand-over of the GIL through the operating system "
               "and one back."), ""]  # fmt: skip
    was = {(r["way"], r["kind"]): r for r in old}
    gil = any("gil_on" in r for r in rows)
    head = "| path | off instr/req | on instr/req | on / off |"
    rule = "|---|---:|---:|---:|"
    if gil:
        head += " GIL releases/req off | on | on, sqlite3's |"
        rule += "---:|---:|---:|"
    if was:
        head += f" before ({name}): off instr/req | before: on instr/req | before: on / off |"
        rule += "---:|---:|---:|"
        if gil:
            head += " before: GIL releases/req on | before: sqlite3's |"
            rule += "---:|---:|"
    lines += [head, rule]
    for r in rows:
        line = (f"| {r['way']}, {r['kind']} | {r['off']:,.0f} | {r['on']:,.0f} | "
                f"{r['ratio']:.3f}x |")  # fmt: skip
        if gil:
            line += (f" {r.get('gil_off', float('nan')):.3f} | {r.get('gil_on', float('nan')):.3f}"
                     f" | {r.get('gil_sqlite3_on', float('nan')):.3f} |")  # fmt: skip
        if (b := was.get((r["way"], r["kind"]))) is not None:
            line += f" {b['off']:,.0f} | {b['on']:,.0f} | {b['ratio']:.3f}x |"
            if gil:
                line += (f" {b.get('gil_on', float('nan')):.3f} | "
                         f"{b.get('gil_sqlite3_on', float('nan')):.3f} |")  # fmt: skip
        lines.append(line)
    return lines


def relay_table(relay: dict[str, Any], old: dict[str, Any], name: str | None) -> list[str]:
    was = {(r.get("kind", "whole"), r["connections"]): r for r in old.get("rows", [])}
    if all(r.get("kind") == "hit" for r in relay["rows"]):
        return hit_table(relay, was, name)
    lines = ["", ("levergate's default proxy path (`levergate serve --upstream`) against the bare "
             "relay (`bare_relay.py`), each under callgrind in front of `levergate sim` (0 ms), "
             "distinct answers, whole or streamed (16 tokens); the server process only, counted "
             "after the warm-up. "
             "Target (issue 22): <= 1.1x."), ""]  # fmt: skip
    head = "| answer | connections | relay instr/req | levergate instr/req | levergate / relay |"
    rule = "|---|---|---:|---:|---:|"
    baseline = relay.get("baseline")
    if baseline:
        head += f" {baseline} instr/req | {baseline} / relay |"
        rule += "---:|---:|"
    if was:
        head += f" before ({name}): levergate / relay |"
        rule += "---:|"
    lines += [head, rule]
    for r in relay["rows"]:
        kind = r.get("kind", "whole")
        if kind == "hit":
            continue
        line = (f"| {kind} | {r['connections']} | {r['relay']:,.0f} | {r['levergate']:,.0f} | "
                f"{r['ratio']:.2f}x |")  # fmt: skip
        if baseline:
            line += f" {r['levergate baseline']:,.0f} | {r['baseline_ratio']:.2f}x |"
        if (b := was.get((kind, r["connections"]))) is not None:
            line += f" {b['ratio']:.2f}x |"
        lines.append(line)
    lines += hit_table(relay, was, name)
    ticks = relay["idle_instructions_per_second"]
    if ticks:
        lines += ["", ("Idle servers, instructions per second of wall time (their timers: in both "
                  "counts, stretched by callgrind's slowdown): "
                  + ", ".join(f"{t} {v:,.0f}" for t, v in ticks.items()) + ".")]  # fmt: skip
    return lines


def hit_table(relay: dict[str, Any], was: dict[tuple[str, int], dict[str, Any]],
              name: str | None) -> list[str]:  # fmt: skip
    """Kind `hit`'s rows: levergate answering from its exact cache against the simulator
    answering the same request."""
    rows = [r for r in relay["rows"] if r.get("kind") == "hit"]
    if not rows:
        return []
    lines = [
        "",
        (
            "Exact-cache hits (`--relay-kinds hit`): the same request every time "
            "(temperature 0), so each counted request is answered from levergate's cache, "
            "against the simulator's own instructions for answering that request (a client's "
            "direct round trip; issue 22's goal: a hit <= 1.5x it in wall-clock time)."
        ),
        "",
    ]
    head = "| connections | simulator instr/req | levergate hit instr/req | hit / simulator |"
    rule = "|---|---:|---:|---:|"
    baseline = relay.get("baseline")
    if baseline:
        head += f" {baseline} hit instr/req | {baseline} / simulator |"
        rule += "---:|---:|"
    if was:
        head += f" before ({name}): hit / simulator |"
        rule += "---:|"
    lines += [head, rule]
    for r in rows:
        line = (f"| {r['connections']} | {r['simulator']:,.0f} | {r['levergate']:,.0f} | "
                f"{r['ratio']:.2f}x |")  # fmt: skip
        if baseline:
            line += f" {r['levergate baseline']:,.0f} | {r['baseline_ratio']:.2f}x |"
        if (b := was.get(("hit", r["connections"]))) is not None:
            line += f" {b['ratio']:.2f}x |"
        lines.append(line)
    return lines


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="N: runs serve N and 2N")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this folder")
    parser.add_argument("--only", choices=("log", "relay", "none"),
                        help="one part, or none (only --merge's runs, put together)")  # fmt: skip
    parser.add_argument("--log-rows", default=",".join(f"{w}:{k}" for w, k in LOG_ROWS),
                        help="the log A/B's rows, way:kind, comma-separated")  # fmt: skip
    parser.add_argument("--parallel", type=int, default=2, help="counted runs at a time")
    parser.add_argument(
        "--cache-sim",
        action="store_true",
        help="the log A/B with callgrind's cache simulation (cachesim.py)",
    )
    parser.add_argument("--branch-sim", action="store_true", help="and its branch simulation")
    parser.add_argument("--log-tree", action="append", default=[], metavar="NAME=SRC",
                        help="another tree's src/: a side of the log A/B, its log on (again: "
                        "another side)")  # fmt: skip
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measured")
    parser.add_argument("--relay-kinds", default="whole",
                        help="the relay A/B's answers, comma-separated: whole, stream, "
                        "hit")  # fmt: skip
    parser.add_argument("--baseline", type=Path,
                        help="another tree's src/, a third target of the relay A/B")  # fmt: skip
    parser.add_argument("--baseline-name", default="baseline", help="what the baseline is")
    parser.add_argument("--connections", default="1,16",
                        help="the relay A/B's connection counts, comma-separated")  # fmt: skip
    parser.add_argument("--name", default="instructions",
                        help="the results' file name (<out>/<name>.json and .md)")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--way", choices=WAYS, default="inprocess", help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=KINDS, default="whole", help=argparse.SUPPRESS)
    parser.add_argument("--request-log", help=argparse.SUPPRESS)
    parser.add_argument("--log-timer", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--marks", help=argparse.SUPPRESS)
    parser.add_argument("--collect", choices=("all", "observe"), default="all",
                        help="the log A/B counts all, or only inside `observe`")  # fmt: skip
    parser.add_argument(
        "--before",
        type=Path,
        nargs="*",
        default=[],
        help="runs' JSON on the code before a change: shown beside this one",
    )
    parser.add_argument("--before-name", default="before", help="what the code before is")
    parser.add_argument(
        "--merge", type=Path, nargs="*", default=[], help="runs' JSON whose rows join this one's"
    )
    add_output_options(parser)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    if args.child:
        child(args)
        return
    out = Output.of(args)
    which = tuple((way, kind) for way, kind in (r.split(":", 1) for r in args.log_rows.split(",")))
    connections = tuple(int(c) for c in args.connections.split(","))
    parallel = args.parallel
    sim = (*(("cache",) if args.cache_sim else ()), *(("branch",) if args.branch_sim else ()))
    trees = {n: Path(p) for n, p in (t.split("=", 1) for t in args.log_tree)}
    # Every run of an A/B at once (four), one row each. Not the caches' simulation, which made
    # the smoke run 2m48s under load (CI allows 240 s): tests/unit/bench/test_cachesim.py reads
    # its files.
    if args.smoke:
        args.requests, args.warmup, args.idle, connections = 3, 2, 0.0, (1,)
        which, parallel = (("inprocess", "whole"),), 4
    with tempfile.TemporaryDirectory(prefix="levergate-instructions-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        marks = None
        if args.collect == "observe":
            from log_breakdown import marks_library

            marks = marks_library(folder)
        log = ([] if args.only in {"relay", "none"} else
               log_ab(folder, args.requests, args.warmup, which, parallel, sim=sim,
                      trees=trees, marks=marks))  # fmt: skip
        relay = ({} if args.only in {"log", "none"} else
                 relay_ab(folder, args.requests, args.warmup, connections=connections,
                          kinds=tuple(args.relay_kinds.split(",")),
                          idle=args.idle, parallel=parallel, baseline=args.baseline))  # fmt: skip
    if relay and args.baseline:
        relay["baseline"] = args.baseline_name
    if args.only == "none":
        args.requests = args.warmup = None
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data: dict[str, Any] = {**stamp(), "requests": args.requests, "warmup": args.warmup,
                            "log": log, "relay": relay, "load_average": load,
                            "log_trees": [t.split("=", 1)[0] for t in args.log_tree],
                            "collect": args.collect}  # fmt: skip
    runs = [json.loads(path.read_text()) for path in args.merge]
    for other in runs:
        data["log"] += other["log"]
        data["relay"] = data["relay"] or other["relay"]
    data["merged"] = [{key: other[key] for key in ("date", "requests", "warmup", "load_average")}
                      for other in runs]  # fmt: skip
    if args.before:
        old = [json.loads(path.read_text()) for path in args.before]
        data["before"] = {"name": args.before_name, "log": [r for o in old for r in o["log"]],
                          "relay": next((o["relay"] for o in old if o["relay"]), {})}  # fmt: skip
    out.write(args.name, data, markdown(data))


if __name__ == "__main__":
    main()
