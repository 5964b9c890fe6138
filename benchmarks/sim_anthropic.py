"""What the simulator's Anthropic routes cost per request, and that adding them did not slow its
OpenAI path (the one `sim_throughput.py` benchmarks).

Measures `Simulator.handle` alone (no sockets: the HTTP layer is the same for both formats),
in CPU microseconds per request, for: an OpenAI chat completion, an Anthropic message (whole,
streamed, with a cached 1,250-token system prompt, and with a tool), each in a fresh process.
With `--baseline-src DIR` (a checkout's `src/` without the Anthropic routes, e.g. the main
tree) the OpenAI case also runs there, interleaved with this tree's runs, and the ratio says
whether the OpenAI path changed. Ratios within one run only: the box is shared and noisy.

    python benchmarks/sim_anthropic.py [--requests 20000] [--rounds 3] [--baseline-src ../main/src]
    python benchmarks/sim_anthropic.py --smoke     # tiny, the baseline this tree itself

writes benchmarks/results/sim_anthropic.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, Output, add_output_options, stamp

HERE = ROOT / "src"

# Runs inside a child process with the chosen `src/` first on the path.
CHILD = r"""
import json, sys, time, orjson
from levergate.simulator import Simulator, SimSettings
cases, n = sys.argv[1].split(","), int(sys.argv[2])
sim = Simulator(settings=SimSettings())
user = [{"role": "user", "content": "Hello there, how are you today?"}]
tool = [{"name": "get_weather", "input_schema": {"type": "object",
         "properties": {"city": {"type": "string"}}}}]
system = [{"type": "text", "text": "word " * 1000, "cache_control": {"type": "ephemeral"}}]
found = {}
for case in cases:
    if case == "openai-chat":
        path, headers = "/v1/chat/completions", {"authorization": "Bearer sk-bench"}
        body = {"model": "m", "messages": user}
    else:
        path = "/v1/messages"
        headers = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 64, "messages": user}
        if case == "anthropic-stream":
            body["stream"] = True
        elif case == "anthropic-cached":
            body["system"] = system
        elif case == "anthropic-tool":
            body["tools"] = tool
            body["messages"] = [{"role": "user", "content": "use get_weather for Paris"}]
    raw = orjson.dumps(body)
    for _ in range(min(2000, n)):  # warm up
        sim.finish(sim.handle(method="POST", path=path, headers=headers, body=raw))
    start = time.process_time()
    for _ in range(n):
        reply = sim.handle(method="POST", path=path, headers=headers, body=raw)
        sim.finish(reply)
    elapsed = time.process_time() - start
    assert reply.status == 200, reply.body
    found[case] = elapsed / n * 1e6
print(json.dumps(found))
"""

CASES = ("openai-chat", "anthropic-whole", "anthropic-stream", "anthropic-cached", "anthropic-tool")


def measure(src: Path, cases: tuple[str, ...], requests: int) -> dict[str, float]:
    """CPU microseconds per request of each case, in one child process with `src` first on
    its path (a measurement runs one case per process; a smoke run all of them in one)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(cases), str(requests)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return {case: float(us) for case, us in json.loads(out.stdout).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, default=None)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.requests, args.rounds = 200, 1
    runs: dict[str, list[float]] = {case: [] for case in CASES}
    baseline: list[float] = []
    for _ in range(args.rounds):  # interleaved, so drift on the box hits every case alike
        for cases in [CASES] if args.smoke else [(case,) for case in CASES]:
            for case, us in measure(HERE, cases, args.requests).items():
                runs[case].append(us)
        if args.baseline_src is not None:
            chat = measure(args.baseline_src.resolve(), ("openai-chat",), args.requests)
            baseline.append(chat["openai-chat"])
    medians = {case: statistics.median(values) for case, values in runs.items()}
    rows = [
        f"| {case} | {medians[case]:.1f} | {medians[case] / medians['openai-chat']:.2f} |"
        for case in CASES
    ]
    data: dict[str, object] = {
        **stamp(),
        "requests": args.requests,
        "rounds": args.rounds,
        "us_per_request": runs,
        "median": medians,
    }
    lines = [
        "# Simulator: CPU per request, Anthropic routes vs the OpenAI chat route",
        "",
        (
            f"{data['date']}, {data['machine']}; `Simulator.handle` only, "
            f"{args.requests} requests x {args.rounds} rounds, median."
        ),
        "",
        "| case | us / request | vs openai-chat |",
        "|---|---|---|",
        *rows,
    ]
    if baseline:
        before = statistics.median(baseline)
        data["baseline_openai_chat"] = baseline
        lines += [
            "",
            (
                f"OpenAI chat route before the Anthropic routes ({args.baseline_src}): "
                f"{before:.1f} us; this tree: {medians['openai-chat']:.1f} us "
                f"(ratio {medians['openai-chat'] / before:.3f})."
            ),
        ]
    out.write("sim_anthropic", data, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
