"""Trim, measured: how many input tokens a budget saves on real multi-turn conversations, what
counting and trimming cost per request, and what the gateway pays with trim off (against the
code before trim existed) and on.

Data, read from ../shared/data at run time (never copied into the repo):
- hh: Anthropic HH-RLHF harmless-base test, 2,312 real human/assistant dialogues. Every user
  turn is one request carrying the history before it, as a chat app sends it, under a one-line
  system prompt added here.
- sharegpt: ShareGPT has only first prompts (its SOURCE.md), so sessions are BUILT: the prompts
  are shuffled (seed 0) and chained 8 to a session as its user turns, each answered by a real
  gpt-3.5-turbo-1106 answer from AlpacaEval (unrelated to the prompt, but real in length). The
  structure is synthetic; the text and its lengths are real.

    python benchmarks/trim.py                       # savings + counting cost
    python benchmarks/trim.py --hot-path --baseline-src /work/main/src   # + gateway A/B
    python benchmarks/trim.py --smoke --hot-path    # tiny: this tree against itself
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, Output, add_output_options, data_file, stamp

from levergate.server.transport import GatewayTransport

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
SESSION_TURNS = 8
MODEL = "gpt-4o"  # o200k_base
HOT_MESSAGES = 10  # the hot-path request: the first HH request with this many messages


def hh_requests() -> list[list[dict[str, Any]]]:
    requests = []
    for line in data_file("hh_rlhf_harmless_test/dialogues.jsonl").open():
        turns = json.loads(line)["turns"]
        history: list[dict[str, Any]] = [SYSTEM]
        for turn in turns:
            history.append({"role": turn["role"], "content": turn["text"]})
            if turn["role"] == "user":
                requests.append(list(history))
    return requests


def sharegpt_requests() -> list[list[dict[str, Any]]]:
    prompts = [json.loads(x)["prompt"] for x in
               data_file("sharegpt_prompts/sharegpt_first_prompts.jsonl").open()]  # fmt: skip
    answers = [json.loads(x)["outputs"]["gpt-3.5-turbo-1106"] for x in
               data_file("alpaca_eval/responses_selected.jsonl").open()]  # fmt: skip
    rng = random.Random(0)
    rng.shuffle(prompts)
    requests = []
    for start in range(0, len(prompts) - SESSION_TURNS + 1, SESSION_TURNS):
        history: list[dict[str, Any]] = [SYSTEM]
        for prompt in prompts[start : start + SESSION_TURNS]:
            history.append({"role": "user", "content": prompt})
            requests.append(list(history))
            history.append({"role": "assistant", "content": rng.choice(answers)})
    return requests


async def savings(requests: list[list[dict[str, Any]]], budget: int) -> dict[str, Any]:
    """Every request through the real Trim layer at `budget` prompt tokens."""
    from prometheus_client import CollectorRegistry

    from levergate.config import Settings
    from levergate.core.call import Call
    from levergate.core.clock import SystemClock
    from levergate.core.reply import Completed
    from levergate.layers.shared import Shared
    from levergate.layers.trim import Trim

    async def inner(call: Call) -> Completed:
        del call
        return Completed(data={"ok": True})

    # The pipeline's own shared state, as `build_pipeline` makes it (the catalog gives the
    # alias's window and tokenizer): a hand-made stand-in drifts from it and breaks the run.
    settings = Settings.for_upstream(
        "http://127.0.0.1:9/v1", cache={"enabled": False},
        models=[{"name": MODEL, "upstream": "default"}],
        trim={"models": {MODEL: {"budget": budget}}},
    )  # fmt: skip
    model = next(m for m in settings.models if m.name == MODEL)
    shared = Shared.build(settings, models={MODEL: model}, clock=SystemClock(),
                          registry=CollectorRegistry())  # fmt: skip
    try:
        layer = Trim.layer(settings.trim, model=model, shared=shared)
        if layer is None:
            raise RuntimeError("a configured alias builds a Trim layer")
        return await _through(layer(inner), requests, budget)
    finally:
        await shared.aclose()


async def _through(
    service: Any, requests: list[list[dict[str, Any]]], budget: int
) -> dict[str, Any]:
    from levergate.core.call import Call, Context
    from levergate.errors import BadRequest
    from levergate.protocol.openai.prompt_tokens import Counter
    from levergate.protocol.tokens import Tiktoken

    counter = Counter(Tiktoken("o200k_base"))
    before = after = trimmed = refused = 0
    seconds: list[float] = []
    for i, messages in enumerate(requests):
        call = Call(kind="chat", body={"model": MODEL, "messages": messages}, ctx=Context(f"r{i}"))
        total = counter.prompt(call.body).total
        started = time.perf_counter()
        try:
            await service(call)
        except BadRequest:
            refused += 1
            continue
        finally:
            seconds.append(time.perf_counter() - started)
        before += total
        after += total - call.ctx.trace.trimmed_input
        trimmed += call.ctx.trace.trimmed_input > 0
    answered = len(requests) - refused
    return {
        "budget": budget, "requests": len(requests), "trimmed_share": trimmed / len(requests),
        "refused_share": refused / len(requests), "input_tokens": before, "sent_tokens": after,
        "saved_share": 1 - after / before if before else 0.0, "answered": answered,
        "us_per_request_mean": statistics.fmean(seconds) * 1e6,
        "us_per_request_p50": statistics.median(seconds) * 1e6,
    }  # fmt: skip


def counting(requests: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Counter.prompt alone: tokens per second and microseconds per request."""
    from levergate.protocol.openai.prompt_tokens import Counter
    from levergate.protocol.tokens import Tiktoken

    counter = Counter(Tiktoken("o200k_base"))
    bodies = [{"messages": m} for m in requests]
    for body in bodies[:200]:
        counter.prompt(body)
    started = time.perf_counter()
    tokens = sum(counter.prompt(body).total for body in bodies)
    elapsed = time.perf_counter() - started
    return {"requests": len(bodies), "tokens": tokens, "tokens_per_second": tokens / elapsed,
            "us_per_request": elapsed / len(bodies) * 1e6,
            "tokens_per_request": tokens / len(bodies)}  # fmt: skip


CHILD_BODY: dict[str, Any] = {}


async def child(mode: str, requests: int, *, calls: bool = False) -> float:
    """CPU microseconds per request of the in-process gateway path against the simulator, or
    with `calls` the Python function calls per request (deterministic: no noise from the box)."""
    import httpx

    from levergate import Gateway, Settings
    from levergate.simulator import SimSettings, run_simulator

    messages = next(m for m in hh_requests() if len(m) >= HOT_MESSAGES)
    body = {"model": MODEL, "messages": messages, "max_tokens": 16}
    trim = None
    if mode != "off":  # the baseline tree has no trim modules: import them only when on
        from levergate.protocol.openai.prompt_tokens import Counter
        from levergate.protocol.tokens import Tiktoken

        tokens = Counter(Tiktoken("o200k_base")).prompt(body).total
        # bound: far above the JSON size (no tokenizing); count: just above the prompt
        # (tokenized, kept whole); trimmed: half the prompt (tokenized, windowed).
        trim = {"bound": 100_000, "count": tokens + 8, "trimmed": tokens // 2}[mode]
    async with run_simulator(SimSettings(port=0)) as sim:
        values: dict[str, Any] = {}
        if trim is not None:
            values["trim"] = {"models": {"*": {"budget": trim}}}
        settings = Settings.for_upstream(sim.base_url, **values)
        async with (
            Gateway(settings) as gateway,
            httpx.AsyncClient(transport=GatewayTransport(gateway), base_url="http://lg/v1") as http,
        ):
            for _ in range(min(200, requests)):  # warm-up
                (await http.post("/chat/completions", json=body)).raise_for_status()
            counted = [0]

            def profile(frame: Any, event: str, arg: Any) -> None:
                del frame, arg
                if event in ("call", "c_call"):
                    counted[0] += 1

            started = time.process_time()
            if calls:
                sys.setprofile(profile)
                threading.setprofile(profile)
            for _ in range(requests):
                await (await http.post("/chat/completions", json=body)).aread()
            sys.setprofile(None)
            if calls:
                return counted[0] / requests
            return (time.process_time() - started) / requests * 1e6


VARIANTS = {
    "before": ("before (baseline src)", "off"),
    "off": ("trim off", "off"),
    "bound": ("trim on, within the byte bound", "bound"),
    "count": ("trim on, counted (kept whole)", "count"),
    "trimmed": ("trim on, trimmed to half", "trimmed"),
}


def hot_path(baseline_src: str, rounds: int, requests: int, keys: list[str]) -> dict[str, Any]:
    """Child processes in a rotated order each round; each variant's ratio is taken against the
    baseline of the same round (paired), then the median over rounds: drift on a shared box
    hits both sides of a pair alike."""
    here = str(ROOT / "src")
    keys = ["before", *(k for k in keys if k != "before")]
    found: dict[str, list[float]] = {key: [] for key in keys}
    for turn in range(rounds):
        for key in keys[turn % len(keys) :] + keys[: turn % len(keys)]:
            src = baseline_src if key == "before" else here
            env = {**os.environ, "PYTHONPATH": src}
            out = subprocess.run(
                [sys.executable, __file__, "--child", VARIANTS[key][1], "--requests",
                 str(requests)], env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode != 0:
                raise RuntimeError(f"{key} failed:\n{out.stderr[-2000:]}")
            found[key].append(float(out.stdout.strip().splitlines()[-1]))
    base = found["before"]
    result = {}
    for key, runs in found.items():
        ratios = [x / b for x, b in zip(runs, base, strict=True)]
        result[VARIANTS[key][0]] = {
            "us_per_request": statistics.median(runs), "runs": runs, "paired_ratios": ratios,
            "ratio_to_before": statistics.median(ratios),
        }  # fmt: skip
    return result


def calls_per_request(
    baseline_src: str, requests: int, *, only: str | None = None
) -> dict[str, float]:
    """Python calls per request: trim off makes exactly the calls the code before it made."""
    here = str(ROOT / "src")
    found = {}
    runs = (("before (baseline src)", baseline_src, "off"), ("trim off", here, "off"),
            ("trim on, within the byte bound", here, "bound"))  # fmt: skip
    for name, src, mode in runs:
        if only is not None and mode != only:
            continue
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--count-calls", "--requests",
             str(requests)], env={**os.environ, "PYTHONPATH": src}, capture_output=True,
            text=True, check=True,
        )  # fmt: skip
        found[name] = float(out.stdout.strip().splitlines()[-1])
    return found


SAVINGS_HEAD = (
    "| budget | requests | trimmed | refused (400) | input tokens | sent | saved "
    "| trim µs/request (mean, p50) |\n|---|---|---|---|---|---|---|---|"
)
COUNTING_HEAD = (
    "| data | requests | tokens/request | tokens/s | µs/request |\n|---|---|---|---|---|"
)
HOT_HEAD = (
    "| variant | µs/request (median) | ratio to before (median of paired rounds) |\n|---|---|---|"
)


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Trim ({result['stamp']['date']}, {result['stamp']['machine']})", ""]
    for name, rows in result.get("savings", {}).items():
        lines += [f"## Input tokens saved: {name}", "", SAVINGS_HEAD]
        for r in rows:
            lines.append(
                f"| {r['budget']:,} | {r['requests']:,} | {r['trimmed_share']:.1%} | "
                f"{r['refused_share']:.1%} | {r['input_tokens']:,} | {r['sent_tokens']:,} | "
                f"{r['saved_share']:.1%} | {r['us_per_request_mean']:.0f}, "
                f"{r['us_per_request_p50']:.0f} |"
            )
        lines.append("")
    if result.get("counting"):
        lines += ["## Counting cost (o200k_base, Counter.prompt)", "", COUNTING_HEAD]
    for name, c in result.get("counting", {}).items():
        lines.append(
            f"| {name} | {c['requests']:,} | {c['tokens_per_request']:.0f} | "
            f"{c['tokens_per_second']:,.0f} | {c['us_per_request']:.1f} |"
        )
    if "hot_path" in result:
        title = (
            f"## Gateway CPU per request, in-process ({result['rounds']} rounds; one HH "
            f"request of {HOT_MESSAGES} messages; gateway, simulator and client in one process)"
        )
        lines += ["", title, "", HOT_HEAD]
        for name, h in result["hot_path"].items():
            lines.append(f"| {name} | {h['us_per_request']:.0f} | {h['ratio_to_before']:.3f}x |")
        lines += [
            "",
            "Python function calls per request (sys.setprofile, deterministic): "
            + ", ".join(f"{k} {v:,.1f}" for k, v in result["calls_per_request"].items()),
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=["off", "bound", "count", "trimmed"])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--hot-path", action="store_true")
    parser.add_argument("--baseline-src", default="/work/main/src")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default="off,bound,count,trimmed")
    parser.add_argument("--name", default="trim", help="results/<name>.json and .md")
    parser.add_argument("--no-savings", action="store_true")
    parser.add_argument("--count-calls", action="store_true", help="(child) calls, not time")
    parser.add_argument("--calls-only", action="store_true", help="before vs off, calls")
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        print(asyncio.run(child(args.child, args.requests, calls=args.count_calls)))
        return
    if args.calls_only:
        print(calls_per_request(args.baseline_src, args.requests))
        return
    out = Output.of(args)
    calls = 300
    if args.smoke:  # every part, this tree against itself, a few requests
        args.baseline_src, args.rounds, args.variants = str(ROOT / "src"), 1, "trimmed"
        args.requests, calls, args.hot_path = 20, 5, True
    result: dict[str, Any] = {"stamp": stamp(), "savings": {}, "counting": {}}
    if not args.no_savings:
        data = {"hh": hh_requests(), "sharegpt (built sessions)": sharegpt_requests()}
        budgets = {"hh": [128, 256, 512, 1024],
                   "sharegpt (built sessions)": [1024, 2048, 4096, 8192]}  # fmt: skip
        for name, every in data.items():
            requests = every[:200] if args.smoke else every
            if args.smoke:
                budgets[name] = budgets[name][:2]
            result["savings"][name] = [asyncio.run(savings(requests, b)) for b in budgets[name]]
            result["counting"][name] = counting(requests)
    if args.hot_path:
        # A smoke run counts one mode: the hot path's two children run the others.
        only = "bound" if args.smoke else None
        result["calls_per_request"] = calls_per_request(args.baseline_src, calls, only=only)
        keys = args.variants.split(",")
        result["rounds"] = args.rounds
        result["hot_path"] = hot_path(args.baseline_src, args.rounds, args.requests, keys)
    out.write(args.name, result, markdown(result))


if __name__ == "__main__":
    main()
