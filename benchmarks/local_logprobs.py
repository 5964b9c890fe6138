"""Token logprobs on the local engine: what they cost when asked, and that decoding does not slow
down when they are not (issue 19: the no-logprobs path must be free of extra cost).

Decode tokens/s of the same greedy streams (end tokens banned, so each runs to `--tokens`) on
engines in separate worker processes, driven one at a time in interleaved rounds:

    before      the engine from `--before SRC` (the code before logprobs, e.g. a worktree of the
                previous commit: `git worktree add /tmp/lg-before HEAD~1`), no logprobs asked
    after       this checkout's engine, no logprobs asked
    after+lp    this checkout, `logprobs: true` (the chosen token's logprob)
    after+top5  this checkout, `logprobs: true, top_logprobs: 5`

at 1 and 8 concurrent streams. Every ratio is against `after` (or `before`) from the same run.
Writes benchmarks/results/local_logprobs.json/.md.

    .venv/bin/python benchmarks/local_logprobs.py --before /tmp/lg-before/src [--quick | --smoke]
        [--threads N]   (1 on a shared, loaded host: two spinning threads there decode ~10x slower)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import Output, add_output_options
from local_common import (
    END_TOKENS,
    SMOKE_THREADS,
    chat,
    engine,
    environment,
    median,
    stop,
    write,
)

HERE = Path(__file__).resolve().parent
THREADS = "LOCAL_LOGPROBS_THREADS"  # how the driver tells a worker its engine's threads
SOURCE = HERE.parent / "src"
VARIANTS = {  # name: (code, logprobs fields of the body)
    "before": ("before", {}),
    "after": ("after", {}),
    "after+lp": ("after", {"logprobs": True}),
    "after+top5": ("after", {"logprobs": True, "top_logprobs": 5}),
}


async def decode(
    endpoint: Any, *, streams: int, tokens: int, body: dict[str, Any]
) -> dict[str, float]:
    """Aggregate decode tokens/s of `streams` greedy answers of `tokens` tokens each, and the
    process's CPU time per token (the engine thread's and the loop's: on a shared host the
    steadier of the two, since waiting for a core costs wall time but no CPU time)."""
    calls = [chat(f"Write a long story about the number {i}.", max_tokens=tokens,
                  logit_bias=END_TOKENS, **body) for i in range(streams)]  # fmt: skip
    started, cpu = time.perf_counter(), time.process_time()
    replies = await asyncio.gather(*[endpoint(call) for call in calls])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    generated = sum(int(r.data["usage"]["completion_tokens"]) for r in replies)
    return {"tokens_per_s": generated / seconds, "cpu_ms_per_token": 1000 * cpu / generated}


def worker() -> int:
    """One engine; each stdin line is a job, each stdout line its tokens/s."""
    endpoint = engine(threads=int(os.environ[THREADS]))
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(decode(endpoint, streams=1, tokens=8, body={}))  # warm-up
        for line in sys.stdin:
            job = json.loads(line)
            print(json.dumps(loop.run_until_complete(decode(endpoint, **job))), flush=True)
    finally:
        stop(endpoint)
        loop.close()
    return 0


class Worker:
    def __init__(self, source: Path, *, threads: int) -> None:
        env = {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{HERE}", THREADS: str(threads)}
        self.proc = subprocess.Popen(  # this script, on another source tree
            [sys.executable, __file__, "--worker"], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip

    def run(self, **job: Any) -> dict[str, float]:
        assert self.proc.stdin is not None  # noqa: S101 - opened with PIPE
        assert self.proc.stdout is not None  # noqa: S101 - opened with PIPE
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        result: dict[str, float] = json.loads(self.proc.stdout.readline())
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(before: Path | None, *, rounds: int, tokens: int, threads: int) -> dict[str, Any]:
    workers = {"after": Worker(SOURCE, threads=threads)}
    if before is not None:
        workers["before"] = Worker(before, threads=threads)
    names = [n for n in VARIANTS if VARIANTS[n][0] in workers]
    runs: dict[str, dict[int, list[dict[str, float]]]] = {n: {1: [], 8: []} for n in names}
    try:
        for i in range(rounds):
            for streams in (1, 8):
                order = names if i % 2 == 0 else names[::-1]  # interleaved: A B C D, D C B A
                for name in order:
                    code, body = VARIANTS[name]
                    runs[name][streams].append(
                        workers[code].run(streams=streams, tokens=tokens, body=body)
                    )
    finally:
        for w in workers.values():
            w.close()

    def medians(key: str) -> dict[str, dict[int, float]]:
        return {
            n: {s: median([r[key] for r in v]) for s, v in by.items()} for n, by in runs.items()
        }

    return {"rounds": rounds, "tokens": tokens, "threads": threads, "runs": runs,
            "tokens_per_s": medians("tokens_per_s"),
            "cpu_ms_per_token": medians("cpu_ms_per_token")}  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    m, c = data["tokens_per_s"], data["cpu_ms_per_token"]
    lines = [
        "# Local engine: token logprobs, asked and not", "",
        (f"SmolLM2-135M Q8_0, {data['threads']} engine thread(s), greedy, {data['tokens']} tokens "
         "per stream (end tokens banned), "
         f"median of {data['rounds']} interleaved rounds; one engine process per code version, "
         "driven one at a time."), "",
        "| variant | streams | tokens/s | vs after | CPU ms per token | vs after |",
        "|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for streams in (1, 8):
        for name in m:
            rate, cpu = m[name][streams], c[name][streams]
            lines.append(f"| {name} | {streams} | {rate:.1f} | {rate / m['after'][streams]:.3f}x "
                         f"| {cpu:.2f} | {cpu / c['after'][streams]:.3f}x |")  # fmt: skip
    if "before" in m:
        lines.append("")
        for streams in (1, 8):
            rate = m["after"][streams] / m["before"][streams]
            cpu = c["after"][streams] / c["before"][streams]
            lines.append(f"No logprobs asked, {streams} stream(s), after / before: tokens/s "
                         f"{rate:.3f}x, CPU per token {cpu:.3f}x.")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="the src/ folder of the code to compare")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="engine threads (default: all cores, as the product)")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.worker:
        return worker()
    out = Output.of(args)
    rounds, tokens = (2, 32) if args.quick else (args.rounds, 96)
    if args.smoke:
        rounds, tokens, args.threads = 1, 8, SMOKE_THREADS
    data = environment()
    data.update(measure(args.before, rounds=rounds, tokens=tokens, threads=args.threads))
    data["before"] = str(args.before) if args.before else None
    write("local_logprobs", data, markdown(data), quick=args.quick, out=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
