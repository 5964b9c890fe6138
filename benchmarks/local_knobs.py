"""The engine's knobs on this machine: what each setting of threads (decoding and prefilling
apart), the step (`batch_tokens`, llama.cpp's n_batch), the compute pass (`ubatch_tokens`,
n_ubatch) and the KV cache type does to prefill and decode speed, and to the size and restore
time of a prefix-cache state. The defaults in config/local.py are read off this table.

Measured on the engine's own `Runtime` (the llama.cpp context the engine thread drives, no
scheduler, no HTTP), on the default model file (Q8_0), one knob moved at a time from the
defaults; variants of a knob alternate within each round, and the medians over rounds are
reported. Threads above the cores are refused by the engine at start (knobs.py); they are
measured here, through a `RuntimeOptions` built by hand, to show why.

    .venv/bin/python benchmarks/local_knobs.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from harness import Output, add_output_options
from local_common import SMOKE_THREADS, environment, median, write

from levergate.config import LocalUpstreamSettings
from levergate.upstreams.local.knobs import KV_TYPES, RuntimeOptions, runtime_options
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.runtime import Runtime


@dataclasses.dataclass(frozen=True)
class Plan:
    prompt: int = 1024  # tokens prefilled
    steps: int = 48  # decode steps timed
    state: int = 1500  # tokens in the saved / restored prefix state
    cores: int = 2  # the base's threads


# A smoke run: one thread (see local_common.SMOKE_THREADS) and a few tokens of each.
SMOKE = Plan(prompt=64, steps=4, state=64, cores=SMOKE_THREADS)


def prefill_tps(runtime: Runtime, tokens: list[int]) -> float:
    runtime.clear()
    started = time.perf_counter()
    for start in range(0, len(tokens), runtime.batch_tokens):
        chunk = tokens[start : start + runtime.batch_tokens]
        last = start + len(chunk) == len(tokens)
        entries = [(t, start + i, 0, last and i == len(chunk) - 1) for i, t in enumerate(chunk)]
        if runtime.decode(entries) != 0:
            raise RuntimeError("llama_decode failed")
    return len(tokens) / (time.perf_counter() - started)


def decode_tps(runtime: Runtime, tokens: list[int], streams: int, steps: int) -> float:
    """Tokens per second of `streams` sequences decoding one token each per step, after a
    32-token prompt each."""
    runtime.clear()
    prompt = tokens[:32]
    for seq in range(streams):
        runtime.decode([(t, i, seq, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    started = time.perf_counter()
    for step in range(steps):
        entries = [(tokens[32 + step], 32 + step, seq, True) for seq in range(streams)]
        if runtime.decode(entries) != 0:
            raise RuntimeError("llama_decode failed")
    return streams * steps / (time.perf_counter() - started)


def state_costs(runtime: Runtime, tokens: list[int], size: int) -> dict[str, float]:
    prefill_tps(runtime, tokens[:size])
    started = time.perf_counter()
    state = runtime.save(0)
    saved = time.perf_counter() - started
    runtime.forget(0)
    started = time.perf_counter()
    runtime.load(1, state)
    loaded = time.perf_counter() - started
    return {"state_bytes_per_token": len(state) / size, "save_ms": saved * 1000,
            "load_ms": loaded * 1000}  # fmt: skip


VARIANTS: dict[str, list[dict[str, Any]]] = {
    "threads": [{"threads": n} for n in (1, 2, 4)],
    "threads_batch": [{"threads_batch": n} for n in (1, 2, 4)],
    "batch_tokens": [{"batch_tokens": n, "ubatch_tokens": n} for n in (128, 256, 512, 1024)],
    "ubatch_tokens": [{"ubatch_tokens": n} for n in (128, 256, 512)],
    "kv_cache_type": [{"kv_type": KV_TYPES[t], "kv_name": t} for t in ("f16", "q8_0", "q4_0")],
}


def measure(
    base: RuntimeOptions, variant: dict[str, Any], tokens: list[int], plan: Plan
) -> dict[str, Any]:
    fields = {k: v for k, v in variant.items() if k != "kv_name"}
    options = dataclasses.replace(base, **fields)
    runtime = Runtime(model_file(LocalUpstreamSettings()), options)
    try:
        return {
            "prefill_tps": prefill_tps(runtime, tokens[: plan.prompt]),
            "decode_tps_1": decode_tps(runtime, tokens, 1, plan.steps),
            "decode_tps_8": decode_tps(runtime, tokens, 8, plan.steps),
            **state_costs(runtime, tokens, plan.state),
        }
    finally:
        runtime.close()


def run(rounds: int, variants: dict[str, list[dict[str, Any]]], plan: Plan) -> dict[str, Any]:
    cores = plan.cores
    base = runtime_options(LocalUpstreamSettings(threads=cores, threads_batch=cores), cores=cores)
    probe = Runtime(model_file(LocalUpstreamSettings()), base)
    words = " ".join(f"{w} bakery bread number {i}" for i, w in enumerate(["one"] * 600))
    tokens = probe.tokenize(words, add_special=False)
    probe.close()
    table: dict[str, list[dict[str, Any]]] = {}
    for knob, settings in variants.items():
        runs: list[list[dict[str, Any]]] = [[] for _ in settings]
        for index in range(rounds):
            order = list(range(len(settings)))
            order = order if index % 2 == 0 else order[::-1]
            for i in order:
                runs[i].append(measure(base, settings[i], tokens, plan))
        table[knob] = [
            {"setting": {k: v for k, v in settings[i].items() if k != "kv_type"},
             **{key: median([r[key] for r in runs[i]]) for key in runs[i][0]}}
            for i in range(len(settings))
        ]  # fmt: skip
    return {"base": dataclasses.asdict(base), "knobs": table}


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# The engine's knobs on a 2-core machine", "",
        (f"SmolLM2-135M Q8_0 through the engine's Runtime; {data['rounds']} rounds, variants "
         "alternating; medians. Prefill: a 1,024-token prompt. Decode: tokens/s of 1 and of 8 "
         "sequences stepping together. State: the prefix cache's save / restore of a "
         "1,500-token sequence."), "",
        ("| knob | setting | prefill tok/s | decode tok/s (1) | decode tok/s (8) | state "
         "bytes/token | save ms | restore ms |"), "|---|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for knob, rows in data["knobs"].items():
        for row in rows:
            setting = ", ".join(f"{k}={v}" for k, v in row["setting"].items())
            lines.append(
                f"| {knob} | {setting} | {row['prefill_tps']:.0f} | {row['decode_tps_1']:.1f} | "
                f"{row['decode_tps_8']:.1f} | {row['state_bytes_per_token']:.0f} | "
                f"{row['save_ms']:.1f} | {row['load_ms']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round instead of 3")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rounds = 1 if args.quick or args.smoke else 3
    # A smoke run: one setting of two knobs, enough to run every measurement once.
    variants = {k: v[:1] for k, v in list(VARIANTS.items())[:2]} if args.smoke else VARIANTS
    plan = SMOKE if args.smoke else Plan()
    data = {**environment(), "rounds": rounds, **run(rounds, variants, plan)}
    write("local_knobs", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
