"""The request log's thread hand-offs, counted (issue 23 §1): counts, not times.

The log's store runs in a thread of its own (requestlog/writer.py), and each time that thread
gives the GIL up and wants it back while the event loop's thread is busy, the two hand it over
through the operating system. Waiting, the thread is woken by every release of the loop's
thread (around its socket calls: ~8 a request in-process), and each wake restarts its 5 ms
timed wait, so CPython 3.11 never asks the loop to drop the GIL for it: it waits until it wins
a race, sometimes thousands of wake-ups (context switches) later. CPython's sqlite3 gives the
GIL up 5 times an `execute` of a statement it has compiled (around `sqlite3_reset` twice, the
step, the column count, the last row id), 4 an `executemany` of one set of values (no row id;
how the log inserts), once more to compile one (counted by callgrind: `instructions.py`'s
`gil_releases`), and a thread pool's hand-off once each way. So what decides the hand-offs is
how many times a batch goes to the thread and how many statements it runs there. This probe
counts, log off and on, per request:

- the gateway process's context switches, voluntary and involuntary (`getrusage`: every thread,
  ended ones too, in-process; through the proxy, /proc/PID/task/*/status of every thread),
  and the share of the log's thread;
- the log's batches, rows, executor submissions, and SQLite statements run (every `execute` on
  the writer's connection, BEGIN and COMMIT included; `executemany` once a set of values), from
  counters the probe wraps around the writer (a Python call each: the store's C path is the
  same);

in-process (`inprocess_cpu.py`'s workload: the httpx client over `GatewayTransport`,
`build_gateway`'s gateway and the simulator in one process, each side a child process of its
own) at concurrency 1 and 16, and through the proxy (`levergate serve` with the log off and on,
in front of one `levergate sim`, loaded by `overhead.load`, levergate's own bench client) at
concurrency 16. The context switches depend on the machine's load (who else wants a core) and
on races: a round of either code may have ~5 a batch or thousands (results/log_handoffs.md);
the statements, submissions and batches a request do not, much.

    python benchmarks/log_handoffs.py [--requests 6000] [--proxy-requests 12000]
        [--only inprocess|proxy] [--name log_handoffs]
    python benchmarks/log_handoffs.py --smoke

Writes benchmarks/results/log_handoffs.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, free_port, stamp, stop, wait_port

HERE = Path(__file__).resolve().parent
COUNTS = Counter[str]()
LOG_THREADS: set[int] = set()  # the writer's thread's native id (3.11 names no OS thread)


# ---- the counters, installed in the measured process -------------------------------------------


class _CountedConnection:
    """The writer's SQLite connection, each statement run counted (`execute`: BEGIN and
    COMMIT included; `executemany`: once a set of values)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, *values: Any) -> Any:
        COUNTS["statements"] += 1
        return self._conn.execute(sql, *values)

    def executemany(self, sql: str, values: Any) -> Any:
        values = list(values)
        COUNTS["statements"] += len(values)
        return self._conn.executemany(sql, values)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def install_counters() -> None:
    """Count each `LogWriter`'s executor submissions, batches, rows and statements."""
    from levergate.requestlog import writer

    init = writer.LogWriter.__init__

    def counted(self: Any, store: Any, **rest: Any) -> None:
        init(self, store, **rest)
        connect, submit, write = store._connect, self._executor.submit, store.write

        def connected() -> Any:
            return _CountedConnection(connect())

        def submitted(*args: Any, **kwargs: Any) -> Any:
            COUNTS["submissions"] += 1
            return submit(*args, **kwargs)

        def written(rows: Any) -> None:
            LOG_THREADS.add(threading.get_native_id())
            COUNTS["batches"] += 1
            COUNTS["rows"] += len(rows)
            write(rows)

        store._connect = connected
        store.write = written
        self._executor.submit = submitted

    writer.LogWriter.__init__ = counted  # type: ignore[method-assign]


def switches(pid: int | str = "self", log: Collection[int] = ()) -> dict[str, int]:
    """Context switches of every live thread of `pid`, and of the log's threads (`log`: their
    native ids) alone."""
    found = Counter[str]()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # ended meanwhile
            continue
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                short = "voluntary" if key.startswith("vol") else "involuntary"
                found[short] += int(value)
                if int(task.name) in log:
                    found[f"log_thread_{short}"] += int(value)
    return dict(found)


# ---- in-process --------------------------------------------------------------------------------


async def inprocess_child(requests: int, concurrency: int, log: str | None) -> dict[str, Any]:
    import httpx
    from inprocess_cpu import BODY, settings

    from levergate.app import build_gateway
    from levergate.server.transport import GatewayTransport
    from levergate.simulator import SimSettings, run_simulator

    async def send(http: httpx.AsyncClient, count: int) -> None:
        for _ in range(count):
            await (await http.post("/chat/completions", json=body)).aread()

    body = {**BODY, "stream": False}
    async with run_simulator(SimSettings(port=0)) as sim:
        gateway = build_gateway(settings(sim.base_url, None, log))
        async with gateway, httpx.AsyncClient(
            transport=GatewayTransport(gateway), base_url="http://levergate/v1"
        ) as http:  # fmt: skip
            await send(http, 300)  # warm-up
            COUNTS.clear()
            before = resource.getrusage(resource.RUSAGE_SELF)
            threads = switches(log=LOG_THREADS)
            await asyncio.gather(*(send(http, requests // concurrency)
                                   for _ in range(concurrency)))  # fmt: skip
            threads = {k: v - threads.get(k, 0) for k, v in switches(log=LOG_THREADS).items()}
        after = resource.getrusage(resource.RUSAGE_SELF)  # the close's write included
    return {"requests": requests // concurrency * concurrency,
            "voluntary": after.ru_nvcsw - before.ru_nvcsw,
            "involuntary": after.ru_nivcsw - before.ru_nivcsw,
            "log_thread_voluntary": threads.get("log_thread_voluntary", 0),
            "log_thread_involuntary": threads.get("log_thread_involuntary", 0),
            **COUNTS}  # fmt: skip


def inprocess(requests: int, concurrency: tuple[int, ...], folder: Path) -> list[dict[str, Any]]:
    rows = []
    for c in concurrency:
        for n, side in enumerate(("off", "on", "on", "off")):
            argv = [sys.executable, str(Path(__file__).resolve()), "--inprocess-child",
                    "--requests", str(requests), "--concurrency", str(c)]  # fmt: skip
            if side == "on":
                argv += ["--request-log", str(folder / f"inprocess-{c}-{n}.sqlite3")]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            rows.append({"way": "inprocess", "concurrency": c, "side": side,
                         **json.loads(out.splitlines()[-1])})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


# ---- through the proxy -------------------------------------------------------------------------


def serve_child(argv: list[str]) -> None:
    """`levergate` with `argv`, the counters installed; SIGUSR1 writes them to $COUNTS_FILE."""
    install_counters()
    out = Path(os.environ["LOG_HANDOFFS_COUNTS"])

    def dump(*_: object) -> None:
        out.write_text(json.dumps({**COUNTS, "log_threads": sorted(LOG_THREADS)}))

    signal.signal(signal.SIGUSR1, dump)
    from levergate.cli.main import main

    sys.exit(main(argv))


def _counts(proc: subprocess.Popen[bytes], file: Path) -> dict[str, Any]:
    file.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not file.exists() or not file.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not write its counts")
        time.sleep(0.01)
    found: dict[str, Any] = json.loads(file.read_text())
    return found


def proxy(requests: int, concurrency: tuple[int, ...], folder: Path) -> list[dict[str, Any]]:
    from overhead import load

    sim_port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "levergate.cli.main", "sim", "--port",
                            str(sim_port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    upstream = f"http://127.0.0.1:{sim_port}/v1"
    gateways: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for side in ("off", "on"):
            port, file = free_port(), folder / f"counts-{side}.json"
            env = {**os.environ, "LOG_HANDOFFS_COUNTS": str(file)}
            if side == "on":
                env["LEVERGATE_REQUEST_LOG__ENABLED"] = "true"
                env["LEVERGATE_REQUEST_LOG__STORE__SQLITE_PATH"] = str(folder / "proxy.sqlite3")
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve",
                                     "serve", "--upstream", upstream, "--port", str(port)],
                                    env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            gateways[side] = (proc, port, file)
        wait_port(sim_port, proc=sim)
        for proc, port, _ in gateways.values():
            wait_port(port, proc=proc)
        for c in concurrency:
            for side in ("off", "on", "on", "off"):
                proc, port, file = gateways[side]
                url = f"http://127.0.0.1:{port}/v1"
                asyncio.run(load(url, concurrency=c, stream=False, seconds=0.5))
                first = _counts(proc, file)
                threads = switches(proc.pid, first["log_threads"])
                result = asyncio.run(_load_requests(url, c, requests))
                # the log's last batch of the window: the job writes it within flush_seconds
                time.sleep(1.5)
                last = _counts(proc, file)
                now = switches(proc.pid, last["log_threads"])
                threads = {k: v - threads.get(k, 0) for k, v in now.items()}
                rows.append({"way": "proxy", "concurrency": c, "side": side,
                             "requests": result, **threads,
                             **{k: v - first.get(k, 0) for k, v in last.items()
                                if k != "log_threads"}})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        for proc, _, _ in gateways.values():
            stop(proc)
        stop(sim)
    return rows


async def _load_requests(url: str, concurrency: int, requests: int) -> int:
    from levergate.bench import BenchConfig, run_bench

    config = BenchConfig(url=url, concurrency=concurrency, requests=requests, stream=False,
                         prompt_tokens=64, max_tokens=16, model="sim-small")  # fmt: skip
    result = (await run_bench(config)).to_dict()
    return int(result["completed"])


# ---- the run -----------------------------------------------------------------------------------

FIELDS = ("voluntary", "involuntary", "log_thread_voluntary", "log_thread_involuntary")


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per way, concurrency and side: the counts a request (summed over the rounds), and a
    batch's statements and submissions."""
    found = []
    for key in sorted({(r["way"], r["concurrency"], r["side"]) for r in rows}):
        mine = [r for r in rows if (r["way"], r["concurrency"], r["side"]) == key]
        total = Counter[str]()
        for r in mine:
            total.update({k: v for k, v in r.items() if isinstance(v, int)})
        requests = max(1, total["requests"])
        batches = max(1, total["batches"])
        found.append({"way": key[0], "concurrency": key[1], "side": key[2],
                      **{f"{k}_per_request": total[k] / requests for k in FIELDS},
                      "rows_per_batch": total["rows"] / batches,
                      "statements_per_batch": total["statements"] / batches,
                      "submissions_per_batch": total["submissions"] / batches,
                      "batches": total["batches"], "requests": total["requests"]})  # fmt: skip
    return found


def markdown(data: dict[str, Any]) -> str:
    lines = [*_table(data)]
    if data.get("before"):
        before = data["before"]
        lines += ["", (f"Before ({data['before_name']}), the same probe at {before['date']}, "
                       f"load average {before.get('load_average', '?')}:"), "",
                  *_table(before)[4:]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _table(data: dict[str, Any]) -> list[str]:
    lines = [f"# The request log's thread hand-offs, counted ({data['date']}, {data['machine']})",
             "", (f"Load average {data.get('load_average', '?')} at the end (a shared host). "
                  f"`benchmarks/log_handoffs.py --requests {data['requests']} --proxy-requests "
                  f"{data['proxy_requests']}`: log off and on, rounds off, on, on, off; counts "
                  "a request summed over the rounds (context switches: every thread of the "
                  "gateway's process; the log thread's alone), and per batch of the log the "
                  "SQLite statements run (BEGIN/COMMIT included) and the executor submissions."),
             "", ("| way | c | log | voluntary cs/req | involuntary cs/req | log thread vol/req "
                  "| rows/batch | statements/batch | submissions/batch | batches |"),
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {s['way']} | {s['concurrency']} | {s['side']} | "
              f"{s['voluntary_per_request']:.4f} | {s['involuntary_per_request']:.4f} | "
              f"{s['log_thread_voluntary_per_request']:.4f} | {s['rows_per_batch']:.1f} | "
              f"{s['statements_per_batch']:.2f} | {s['submissions_per_batch']:.2f} | "
              f"{s['batches']} |" for s in data["summary"]]  # fmt: skip
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000, help="in-process, a round")
    parser.add_argument("--proxy-requests", type=int, default=12000, help="a round")
    parser.add_argument("--only", choices=("inprocess", "proxy"))
    parser.add_argument("--name", default="log_handoffs")
    parser.add_argument("--before", type=Path, help="a run's JSON on the code before, shown too")
    parser.add_argument("--before-name", default="before", help="what the code before is")
    parser.add_argument("--inprocess-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--request-log", default=None, help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.inprocess_child:
        install_counters()
        print(json.dumps(asyncio.run(inprocess_child(args.requests, args.concurrency,
                                                     args.request_log))))  # fmt: skip
        return
    out = Output.of(args)
    if args.smoke:
        args.requests, args.proxy_requests = 64, 200
    with tempfile.TemporaryDirectory(prefix="levergate-log-handoffs-") as tmp:
        folder = Path(tmp)
        rows = [] if args.only == "proxy" else inprocess(args.requests, (1, 16), folder)
        if args.only != "inprocess":
            rows += proxy(args.proxy_requests, (16,), folder)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    data = {**stamp(), "requests": args.requests, "proxy_requests": args.proxy_requests,
            "load_average": load,
            "rows": rows, "summary": summary(rows)}  # fmt: skip
    if args.before:
        data["before"] = json.loads(args.before.read_text())
        data["before_name"] = args.before_name
    out.write(args.name, data, markdown(data))


if __name__ == "__main__":
    main()
