"""Tokenizing a warm prompt on the embedded engine: whole (llama.cpp's tokenizer over the whole
text, as llama-server does) against piece by piece with the pieces a recent prompt had cached
(`upstreams/local/pieces.py`), on the prompts of `local_vs_llama_server.py`: a ~1.5k-token
system prompt and a question, the system prompt seen once before with another question.

Each round uses a system prompt never seen before; the two ways alternate (A, B, B, A...) over
the same text, so both see the same machine load. CPU time of the calling thread, which is
what tokenizing costs a request (llama.cpp's tokenizer runs on that thread alone).

    .venv/bin/python benchmarks/local_tokenize.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

from harness import Output, add_output_options
from local_common import environment, median, write
from local_prefix import system_prompt

from levergate.config import LocalUpstreamSettings
from levergate.upstreams.local.knobs import runtime_options
from levergate.upstreams.local.model import model_file
from levergate.upstreams.local.pieces import PieceTokenizer
from levergate.upstreams.local.runtime import Runtime
from levergate.upstreams.local.template import chatml


def cpu_ms(run: Callable[[], object], repeat: int) -> float:
    """Median CPU milliseconds of the calling thread over `repeat` calls."""
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        run()
        times.append((time.thread_time() - started) * 1000)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 12")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rounds, repeat = (1, 3) if args.smoke else (3, 10) if args.quick else (12, 20)
    settings = LocalUpstreamSettings(n_ctx=512, slots=1, threads=1)
    runtime = Runtime(model_file(settings), runtime_options(settings, cores=1))
    data: dict[str, Any] = {**environment(), "prompt_tokens": args.prompt_tokens, "rows": []}
    try:
        pieces = PieceTokenizer(
            lambda text, add_special: runtime.tokenize(text, add_special=add_special),
            runtime.specials(),
        )
        for index in range(rounds):
            system = system_prompt(1000 + index, args.prompt_tokens)
            pieces(chatml([("system", system), ("user", "When do you open?")]))  # the cold one
            warm = chatml([("system", system), ("user", "Do you deliver?")])
            if pieces(warm) != runtime.tokenize(warm):
                raise SystemExit("piece by piece gave other tokens than the whole text")
            ways: dict[str, Callable[[], object]] = {
                "whole": functools.partial(runtime.tokenize, warm),
                "pieces": functools.partial(pieces, warm),
            }
            order = list(ways) if index % 2 == 0 else list(reversed(ways))
            row = {name: cpu_ms(ways[name], repeat) for name in order}
            row["tokens"] = len(runtime.tokenize(warm))
            data["rows"].append(row)
    finally:
        runtime.close()
    whole = median([r["whole"] for r in data["rows"]])
    cached = median([r["pieces"] for r in data["rows"]])
    data["summary"] = {"whole_ms": whole, "pieces_ms": cached, "ratio": cached / whole}
    markdown = "\n".join([
        "# Tokenizing a warm prompt: whole, or piece by piece from a cache", "",
        (f"The bundled SmolLM2's vocabulary; a ~{args.prompt_tokens}-token system prompt and a "
         "question, the system prompt seen before with another question; CPU time per "
         f"tokenization (median of {repeat} per round, {rounds} rounds, the two ways "
         "alternating)."), "",
        "| whole (ms) | pieces (ms) | ratio |", "|---:|---:|---:|",
        f"| {whole:.3f} | {cached:.3f} | {cached / whole:.3f}x |", "",
        "Per round (ms, whole / pieces): "
        + ", ".join(f"{r['whole']:.2f}/{r['pieces']:.3f}" for r in data["rows"]),
    ]) + "\n"  # fmt: skip
    write("local_tokenize", data, markdown, quick=args.quick, out=out)


if __name__ == "__main__":
    main()
