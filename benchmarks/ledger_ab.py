"""Does the cost ledger slow the hot path? Measure's bookkeeping with the pricing before the
ledger (`--old`, a checkout's src, by default `main` unpacked with `git archive`) against this
tree's, as a ratio, in alternating rounds so both see the same machine at the same moments.

Two figures per tree, each in its own child process (same interpreter):
- `measure`: CPU per finished request of Measure alone over an in-memory answer that reports
  usage with cached tokens (the record, its pricing and savings, the Prometheus sink(s)); the
  part of the gateway this change touches.
- `pipeline`: CPU per request of the whole in-process path (`inprocess_cpu.py`: httpx client,
  gateway, simulator in one process), where the ledger's share is diluted by everything else.

    python benchmarks/ledger_ab.py [--old ../other/src] [--rounds 4] [--requests 20000]
    python benchmarks/ledger_ab.py --smoke     # tiny: this tree against itself

Writes benchmarks/results/ledger_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import ROOT, Output, add_output_options, stamp

DETAILS = {"cached_tokens": 1024}
USAGE = {"prompt_tokens": 1200, "completion_tokens": 80, "prompt_tokens_details": DETAILS}


def _measure_args(telemetry: Any, price: dict[str, Any]) -> dict[str, Any]:
    """Measure's keyword arguments in whichever tree is imported: a Recorder since the
    finished-request record (issue 21), telemetry with a catalog since the ledger, telemetry
    with prices before it."""
    try:
        from levergate.catalog import Catalog
    except ImportError:
        return {"telemetry": telemetry, "prices": price}
    try:
        from levergate.layers.measure.recorder import Recorder
    except ImportError:
        return {"telemetry": telemetry, "catalog": Catalog.of_prices(price)}
    return {"recorder": Recorder(telemetry, catalog=Catalog.of_prices(price))}


async def measure_cpu(requests: int) -> float:
    """Microseconds of CPU per request through Measure alone (whichever Measure is imported)."""
    from levergate.config import MetricsSettings, PriceSettings
    from levergate.core.call import Call, Context
    from levergate.core.controls import Controls
    from levergate.core.reply import Completed, Reply
    from levergate.layers.measure.measure import Measure, Telemetry

    price = {
        "m": PriceSettings.model_validate({"input": 2.5, "output": 10.0, "cached_input": 1.25})
    }

    async def answer(call: Call) -> Reply:
        call.ctx.trace.alias, call.ctx.trace.upstream = "m", "up"
        call.ctx.trace.tenant = "acme"
        return Completed(data={"model": "m", "usage": USAGE})

    measure = Measure(answer, **_measure_args(Telemetry(MetricsSettings()), price))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def one() -> None:
        await measure(Call("chat", body, Context("r", controls=Controls(feature="f"))))
        await asyncio.sleep(0)  # the record is built on the next loop turn

    for _ in range(min(2000, requests)):  # warm-up
        await one()
    started = time.process_time()
    for _ in range(requests):
        await one()
    return (time.process_time() - started) / requests * 1e6


def child(requests: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from inprocess_cpu import cpu_per_request

    result = {
        "measure": asyncio.run(measure_cpu(requests)),
        "pipeline": asyncio.run(cpu_per_request(max(20, requests // 10), stream=False)),
    }
    print(json.dumps(result))


def run_child(src: str, requests: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--requests", str(requests)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def unpack(ref: str, into: Path) -> str:
    """`ref`'s src/ tree, unpacked from git (no checkout touched)."""
    archive = into / "src.tar"
    with archive.open("wb") as handle:
        subprocess.run(["git", "archive", ref, "src"], cwd=ROOT, check=True, stdout=handle)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return str(into / "src")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", help="src/ of the checkout to compare against")
    parser.add_argument("--old-ref", default="main", help="git ref unpacked when --old is unset")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--child", action="store_true")
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.requests)
        return
    out = Output.of(args)
    if args.smoke:
        args.old, args.rounds, args.requests = str(ROOT / "src"), 1, 200
    with tempfile.TemporaryDirectory() as tmp:
        old = args.old or unpack(args.old_ref, Path(tmp))
        new = str(ROOT / "src")
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for name, src in (("old", old), ("new", new)):
                runs[name].append(run_child(src, args.requests))
    report(runs, args, old_label=args.old or args.old_ref, out=out)


def report(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace, *,
           old_label: str, out: Output) -> None:  # fmt: skip
    rows = []
    data: dict[str, Any] = {**stamp(), "old": old_label, "rounds": args.rounds,
                            "requests": args.requests, "runs": runs}  # fmt: skip
    for what in ("measure", "pipeline"):
        old = statistics.median(r[what] for r in runs["old"])
        new = statistics.median(r[what] for r in runs["new"])
        data[what] = {"old_us": old, "new_us": new, "ratio": new / old}
        spread = [f"{r[what]:.1f}" for r in runs["old"]], [f"{r[what]:.1f}" for r in runs["new"]]
        rows.append(f"| {what} | {old:.1f} | {new:.1f} | {new / old:.3f} | "
                    f"{', '.join(spread[0])} / {', '.join(spread[1])} |")  # fmt: skip
    markdown = (
        f"# Cost ledger A/B ({data['date']}, {data['machine']})\n\n"
        f"`benchmarks/ledger_ab.py --rounds {args.rounds} --requests {args.requests}`: CPU "
        f"microseconds per request, medians of alternating rounds; old = `{old_label}` (the "
        "pricing before the ledger), new = this tree.\n\n"
        "| path | old us/req | new us/req | new / old | rounds old / new |\n|---|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )  # fmt: skip
    out.write("ledger_ab", data, markdown)


if __name__ == "__main__":
    main()
