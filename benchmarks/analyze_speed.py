"""How fast is `levergate analyze` on the fingerprint-only levers (issue 25 §2: 100,000 logged
requests in under a minute on 2 cores)?

The log: the Mooncake conversation trace (its arrival times, prompt and output sizes, and its
512-token prefix blocks as the prefix digests) written as request-log rows with their replay
features, tiled until it holds `--requests` records (each copy a tenant of its own, an hour
later, with prefixes of its own). Four endpoints serve the model. The candidate turns on the
exact cache, prefix affinity and deferral against a baseline with none, so the analysis replays
five configurations (the baseline, the candidate, each lever alone), on two cores
(analyze/parallel.py).

Timed, each as a child process (`levergate ...`, imports included), in alternating rounds:
`levergate analyze --db LOG --json` and, for scale, `levergate log export --db LOG` (reading
every record of the same log once and writing it out): the ratio says what the replay costs
beyond reading the log.

    python benchmarks/analyze_speed.py [--requests 100000] [--rounds 2]
    python benchmarks/analyze_speed.py --smoke

Writes benchmarks/results/analyze_speed.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml
from harness import Output, add_output_options, data_file, stamp

from levergate.bench.traces import MOONCAKE_BLOCK_TOKENS, read_mooncake
from levergate.catalog import Catalog
from levergate.layers.measure.record import RequestRecord, Timings, Tokens
from levergate.policies.pricing import cost
from levergate.requestlog.features import BLOCK_BYTES, MAX_BLOCKS, encode_blocks
from levergate.requestlog.row import row_of
from levergate.requestlog.store import SqliteLog

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
MODEL = "gpt-4o-mini"
ENDPOINTS = 4
START = 1_700_000_000.0


def settings(*, candidate: bool) -> dict[str, Any]:
    ups = [{"name": f"e{i}", "base_url": f"http://127.0.0.1:{9000 + i}/v1"}
           for i in range(ENDPOINTS)]  # fmt: skip
    model = {"name": MODEL, "endpoints": [{"upstream": u["name"]} for u in ups]}
    found: dict[str, Any] = {"upstreams": ups, "models": [model],
                             "cache": {"enabled": candidate}}  # fmt: skip
    if candidate:
        model["balance"] = "affinity"
        found |= {"defer": {"enabled": True}, "batch": {"enabled": True}}
    return found


def rows(count: int) -> list[tuple[Any, ...]]:
    """`count` log rows from the tiled trace (module docstring)."""
    trace = list(read_mooncake(data_file("mooncake_traces/conversation_trace.jsonl")))
    span = trace[-1].offset_s + 1.0
    rates = Catalog.builtin().rates(MODEL)
    found: list[tuple[Any, ...]] = []
    for n in range(count):
        tile, t = divmod(n, len(trace))
        r = trace[t]
        blocks = [tile * 10**9 + b for b in r.hash_ids[:MAX_BLOCKS]]
        arrival = START + tile * span + r.offset_s
        total = 0.4 + 0.0002 * r.input_tokens + r.output_tokens / 60.0
        tokens = Tokens(r.input_tokens, 0, 0, r.output_tokens)
        fp = hash((tile, *r.hash_ids, r.output_tokens)) & (2**64 - 1)  # ints: a stable hash
        replay = {"v": 1, "fp": f"{fp:x}", "det": True, "n": 1, "blocks": encode_blocks(blocks),
                  "pb": r.input_tokens * BLOCK_BYTES // MOONCAKE_BLOCK_TOKENS}  # fmt: skip
        record = RequestRecord(
            request_id=f"r{n}", kind="chat", tenant=f"t{tile}", feature="", model=MODEL,
            alias=MODEL, upstream=f"e{n % ENDPOINTS}", upstream_model=MODEL, outcome="ok",
            status=200, error=None, timings=Timings(total, total - 0.001, 0.001), tokens=tokens,
            cost_usd=cost(tokens, rates),
        )  # fmt: skip
        found.append(row_of(arrival + total, record, (None, None), orjson.dumps(replay).decode()))
    return found


def timed(argv: Sequence[str]) -> dict[str, float]:
    """Wall and CPU seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu}


def measure(folder: Path, requests: int, rounds: int) -> dict[str, Any]:
    db = folder / "log.sqlite3"
    started = time.perf_counter()
    store = SqliteLog(str(db), timeout_seconds=30)
    store.write(rows(requests))
    store.close()
    written = time.perf_counter() - started
    for name, candidate in (("baseline", False), ("candidate", True)):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(settings(candidate=candidate)))
    analyze = [*LEVERGATE, "analyze", "--db", str(db), "--config", str(folder / "candidate.yaml"),
               "--baseline", str(folder / "baseline.yaml"), "--json", "--quiet"]  # fmt: skip
    export = [*LEVERGATE, "log", "export", "--db", str(db), "-o", str(folder / "out.jsonl")]
    runs: dict[str, list[dict[str, float]]] = {"analyze": [], "export": []}
    load = os.getloadavg()[0]
    for _ in range(rounds):
        runs["analyze"].append(timed(analyze))
        runs["export"].append(timed(export))
    result = orjson.loads(subprocess.run(analyze, check=True, capture_output=True).stdout)
    return {"requests": requests, "rounds": rounds, "write_seconds": written, "runs": runs,
            "load_average": [load, os.getloadavg()[0]],
            "replay_seconds": result["replay_seconds"],
            "levers": [r["lever"] for r in result["levers"]],
            "change_share": result["total"]["change_share"]}  # fmt: skip


def report(found: dict[str, Any], when: dict[str, str]) -> str:
    med = {k: statistics.median(r["wall"] for r in v) for k, v in found["runs"].items()}
    cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in found["runs"].items()}
    n = found["requests"]
    lines = [
        "# `levergate analyze` speed, fingerprint-only levers (issue 25)",
        "",
        (f"{when['date']}, {when['machine']} (shared with other work). {n:,} request-log "
         f"records (the Mooncake conversation trace tiled, {ENDPOINTS} endpoints); the "
         f"candidate changes {', '.join(found['levers'])}: five replays (baseline, candidate, "
         f"each lever alone). Median of {found['rounds']} rounds, each a child process; the "
         f"machine's load average {found['load_average'][0]:.1f} before and "
         f"{found['load_average'][1]:.1f} after (2 cores: wall time above CPU time is time "
         "spent waiting for a core)."),
        "",
        "| command | wall s | CPU s | per 100k records, wall s |",
        "|---|---|---|---|",
        *(f"| levergate {k if k == 'analyze' else 'log export'} | {med[k]:.2f} | {cpu[k]:.2f} | "
          f"{med[k] * 100_000 / n:.1f} |" for k in ("analyze", "export")),
        "",
        (f"**analyze / export: {med['analyze'] / med['export']:.2f}x** (the replays' share: "
         f"{found['replay_seconds']:.2f} s of the analysis; the rest is reading the log). "
         f"Goal: 100,000 records in under 60 s on 2 cores: "
         f"{'met' if med['analyze'] * 100_000 / n < 60 else 'NOT met'} in wall time, "
         f"{'met' if cpu['analyze'] * 100_000 / n < 60 else 'NOT met'} in CPU time (both "
         "processes: the replays run half in a forked child, analyze/parallel.py). Predicted "
         "change in spend on this trace: "
         f"{found['change_share']:+.1%}."),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    add_output_options(parser)
    args = parser.parse_args(argv)
    out = Output.of(args)
    requests, rounds = (2_000, 1) if args.smoke else (args.requests, args.rounds)
    when = stamp()
    with tempfile.TemporaryDirectory(prefix="analyze-speed-") as folder:
        found = measure(Path(folder), requests, rounds)
    out.write("analyze_speed", {**when, **found}, report(found, when))


if __name__ == "__main__":
    main()
