"""Quantization levels of the bundled model, measured side by side: file size, memory, prefill
and decode speed, perplexity on a fixed public-domain text, and agreement of greedy answers
with the reference's on a fixed prompt set (the shadow comparison cascades and routes use,
policies/shadow.py).

The reference is the most precise file this source gives. The bundled SmolLM2 ships as Q4_1,
so F16 is refused (`levergate local quantize --list` says why: an F16 copy of Q4_1 weights has
Q4_1's quality at 3.5x the size); the source itself, loaded as it is (`off`), is then the
reference: every other level is a re-quantization of it.

Each level runs in a fresh process (memory is its own), levels in a rotated order each round,
so every level sees the same machine load; speeds are the medians over rounds. The text is
PEP 257 (public domain; benchmarks/data/SOURCE.md).

    .venv/bin/python benchmarks/local_quantize.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from harness import Output, add_output_options
from local_common import (
    END_TOKENS,
    SMOKE_THREADS,
    chat,
    complete,
    environment,
    median,
    stop,
    timed,
    write,
)

from levergate.config import (
    LocalEmbeddingsSettings,
    LocalUpstreamSettings,
    PrefixCacheSettings,
    Quantization,
)
from levergate.errors import ConfigError
from levergate.policies.shadow import agree
from levergate.upstreams.local import LocalEndpoint
from levergate.upstreams.local.knobs import runtime_options, usable_cores
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.runtime import Runtime

LEVELS: list[Quantization] = ["off", "f16", "q8_0", "q6_k", "q5_k_m", "q5_0", "q4_k_m", "q4_0"]
TEXT = Path(__file__).resolve().parent / "data" / "pep-0257.rst"
PROMPTS = [
    "What is the capital of France? Answer with one word.",
    "What is the capital of Japan? Answer with one word.",
    "What is 12 plus 7? Answer with a number only.",
    "What is 9 times 6? Answer with a number only.",
    "Is the sun a star? Answer yes or no.",
    "Is water wet? Answer yes or no.",
    "Which is larger, an elephant or a mouse? Answer with one word.",
    "What colour is the sky on a clear day? Answer with one word.",
    "Translate 'cat' into French. Answer with one word.",
    "What is the opposite of 'hot'? Answer with one word.",
    "How many days are in a week? Answer with a number only.",
    "Name the largest planet in the solar system. Answer with one word.",
    "Complete the sentence: The quick brown fox jumps over the lazy",
    "Write one sentence about the sea.",
    "Give three fruits, comma separated.",
    "What does CPU stand for?",
    "Explain in one sentence what a compiler does.",
    "Write a haiku about autumn.",
    "List the first five prime numbers.",
    "What is photosynthesis? Answer in one sentence.",
]
PREFILL_TOKENS = 1000


@dataclass(frozen=True, slots=True)
class Size:
    """How much each level is asked: the full run, or `--small` for a loaded machine."""

    prefill: int = PREFILL_TOKENS
    decode: int = 128
    prompts: int = len(PROMPTS)
    answer_tokens: int = 48
    ppl_tokens: int = 4096
    threads: int = 2


SMALL = Size(prefill=300, decode=48, prompts=8, answer_tokens=24, ppl_tokens=512)
SMOKE = Size(prefill=32, decode=4, prompts=2, answer_tokens=4, ppl_tokens=64, threads=SMOKE_THREADS)
# A smoke run builds one level, the smallest (the quickest to write and to load), beside the
# source as it is: the quantizer's path and the comparison's, end to end.
SMOKE_LEVELS: list[Quantization] = ["off", "q4_0"]


def settings(level: Quantization, cache_dir: str, *, threads: int) -> LocalUpstreamSettings:
    return LocalUpstreamSettings(
        requantize=level,
        cache_dir=cache_dir,
        threads=threads,
        threads_batch=threads,
        slots=4,
        n_ctx=4096,
        prefix_cache=PrefixCacheSettings(ram_bytes=0),
        embeddings=LocalEmbeddingsSettings(enabled=False),
    )


def rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def perplexity(level_settings: LocalUpstreamSettings, *, limit: int) -> float:
    """exp(mean negative log-likelihood) of the text's tokens, each predicted from all the
    tokens before it (one window: the text is shorter than the context)."""
    options = runtime_options(level_settings, cores=usable_cores())
    runtime = Runtime(model_file(level_settings), options)
    try:
        text = runtime.tokenize(TEXT.read_text(), add_special=False)
        tokens = text[: min(limit, runtime.n_ctx - 1)]
        nll: list[float] = []
        step = runtime.batch_tokens
        for start in range(0, len(tokens) - 1, step):
            chunk = tokens[start : start + step]
            entries = [(t, start + i, 0, True) for i, t in enumerate(chunk)]
            if runtime.decode(entries) != 0:
                raise RuntimeError("llama_decode failed")
            for i in range(len(chunk)):
                if start + i + 1 >= len(tokens):
                    break
                logits = runtime.logits(i).astype(np.float64)
                top = logits.max()
                lse = top + math.log(float(np.exp(logits - top).sum()))
                nll.append(lse - logits[tokens[start + i + 1]])
        return math.exp(sum(nll) / len(nll))
    finally:
        runtime.close()


async def measure(
    level: Quantization, cache_dir: str, *, quality: bool, size: Size
) -> dict[str, Any]:
    """One level, in this (fresh) process: its speeds, and with `quality` its answers and
    perplexity (deterministic, so measured in the first round only)."""
    chosen = settings(level, cache_dir, threads=size.threads)
    path = model_file(chosen)
    before = rss_bytes()
    endpoint = LocalEndpoint(chosen)
    try:
        filler = " ".join(f"word{i}" for i in range(size.prefill))
        await timed(endpoint, chat("Warm-up.", max_tokens=2))
        prefill = await timed(endpoint, chat(f"Summarize: {filler}", max_tokens=1))
        decode = await timed(endpoint, chat("Tell me a long story.", max_tokens=size.decode,
                                            logit_bias=END_TOKENS))  # fmt: skip
        memory = rss_bytes() - before
        answers = []
        for prompt in PROMPTS[: size.prompts] if quality else []:
            data = await complete(endpoint, chat(prompt, max_tokens=size.answer_tokens))
            answers.append(data["choices"][0]["message"]["content"])
    finally:
        stop(endpoint)
    return {
        "level": level, "file": path.name, "file_bytes": path.stat().st_size,
        "rss_bytes": memory, "prefill_tps": prefill.prompt / prefill.ttft,
        "decode_tps": decode.decode_rate, "answers": answers,
        "perplexity": perplexity(chosen, limit=size.ppl_tokens) if quality else None,
    }  # fmt: skip


def one(level: Quantization, cache_dir: str, *, quality: bool, size: list[str]) -> dict[str, Any]:
    """`level` measured in a child process (so each level's memory and caches are its own);
    `size` is the command line's size flag, passed on."""
    args = [sys.executable, __file__, "--one", level, "--cache-dir", cache_dir, *size]
    done = subprocess.run(
        [*args, *(["--quality"] if quality else [])], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"level": level, "refused": done.stderr.strip().splitlines()[-1]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(rounds: int, cache_dir: str, *, levels: list[Quantization], args: argparse.Namespace
        ) -> dict[str, Any]:  # fmt: skip
    flag = ["--smoke"] if args.smoke else ["--small"] if args.small else []
    results: dict[str, list[dict[str, Any]]] = {level: [] for level in levels}
    for index in range(rounds):
        order = levels[index % len(levels) :] + levels[: index % len(levels)]
        for level in order:
            results[level].append(one(level, cache_dir, quality=index == 0, size=flag))
    return {"levels": summarize(results), "size": dataclasses.asdict(size_of(args))}


def size_of(args: argparse.Namespace) -> Size:
    return SMOKE if args.smoke else SMALL if args.small else Size()


def summarize(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    reference = next(runs[0] for runs in results.values() if "refused" not in runs[0])
    rows = []
    for level, runs in results.items():
        if "refused" in runs[0]:
            rows.append({"level": level, "refused": runs[0]["refused"]})
            continue
        pairs = list(zip(runs[0]["answers"], reference["answers"], strict=True))
        rows.append({
            "level": level, "file": runs[0]["file"], "file_bytes": runs[0]["file_bytes"],
            "rss_bytes": median([r["rss_bytes"] for r in runs]),
            "prefill_tps": median([r["prefill_tps"] for r in runs]),
            "decode_tps": median([r["decode_tps"] for r in runs]),
            "perplexity": runs[0]["perplexity"],
            "agreement": sum(agree(a, b) for a, b in pairs) / len(pairs),
            "identical": sum(a == b for a, b in pairs) / len(pairs),
            "answers": runs[0]["answers"],
        })  # fmt: skip
    return rows


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Quantization levels of SmolLM2-135M-Instruct on this CPU", "",
        (f"{data['rounds']} rounds, each level in a fresh process, order rotated per round; "
         f"{data['size']['threads']} threads. Speeds are medians; perplexity is over the first "
         f"{data['size']['ppl_tokens']} tokens of PEP 257 (public domain, benchmarks/data/); "
         "agreement is the shadow comparison (policies/shadow.py) of greedy answers to "
         f"{data['size']['prompts']} fixed prompts with the reference's (`off`: the bundled "
         "Q4_1 file as shipped), identical = the same text."), "",
        ("| level | file | memory | prefill tok/s | decode tok/s | perplexity | agreement "
         "| identical |"), "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for row in data["levels"]:
        if "refused" in row:
            lines.append(f"| {row['level']} | refused: {row['refused']} |||||||")
            continue
        lines.append(
            f"| {row['level']} | {row['file_bytes'] / 1e6:.0f} MB | {row['rss_bytes'] / 1e6:.0f} MB"
            f" | {row['prefill_tps']:.0f} | {row['decode_tps']:.1f} | {row['perplexity']:.2f} | "
            f"{row['agreement']:.0%} | {row['identical']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round instead of 3")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--quality", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--small", action="store_true", help="fewer tokens (a loaded machine)")
    parser.add_argument("--cache-dir", default=None, help="where levels are built (a temp dir)")
    add_output_options(parser)
    args = parser.parse_args()
    if args.one:
        try:
            result = measure(args.one, args.cache_dir, quality=args.quality, size=size_of(args))
            print(json.dumps(asyncio.run(result)))
        except ConfigError as exc:
            sys.exit(exc.message)
        return
    out = Output.of(args)
    rounds = args.rounds or (1 if args.quick or args.smoke else 3)
    levels = SMOKE_LEVELS if args.smoke else LEVELS
    with tempfile.TemporaryDirectory() as scratch:
        cache_dir = args.cache_dir or scratch
        for level in levels:  # build each level once, before anything is timed
            one_build = [sys.executable, "-m", "levergate.cli.main", "local", "quantize",
                         "--cache-dir", cache_dir, "--level", level,
                         *(["--threads", str(SMOKE_THREADS)] if args.smoke else [])]  # fmt: skip
            if level != "off":
                subprocess.run(one_build, capture_output=True, check=False)
        data = {**environment(), "rounds": rounds,
                **run(rounds, cache_dir, levels=levels, args=args)}  # fmt: skip
    write("local_quantize", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
