"""The checked-in report (docs/reports/): the real Azure LLM inference trace (2023, code
assistant: arrival times, prompt and output token counts) replayed through `levergate serve`
in front of `levergate sim`, with the exact cache and rate limits on and the request log
recording, then `levergate report` of the log and a PNG preview of the page from headless
Chromium.

    python benchmarks/azure_report.py [--trace azure-code] [--time-scale 0.1]
    python benchmarks/azure_report.py --smoke      # 40 requests, into a temporary folder

What is the trace's and what is not: arrivals (time-compressed by --time-scale), prompt sizes
and output sizes are the trace's; the text is synthetic (the trace has none), so 10% of the
requests repeat an earlier one on purpose (what the exact cache can serve), every one asked of
`gpt-4o` at temperature 0, streamed. Prices are the built-in catalog's; the simulator answers
at 150 ms to the first token plus 0.05 ms per uncached prompt token, then 250 tokens/s; the
gateway limits the upstream to 4,000 requests and 10 M tokens a minute and 256 at once (a
request over a limit waits its turn: the queue wait is in the log). Not here: a route, whose
exact-cache hits the ledger prices at the route name's rates (none: $0) rather than the model
that answered first, so its savings would read low. The trace is read from ../shared/data at
run time, never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from harness import ROOT, Output, add_output_options, free_port, stamp, stop, wait_port

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
REPORTS = ROOT / "docs" / "reports"


def gateway_config(port: int, sim_port: int, db: Path) -> dict[str, Any]:
    upstream = f"http://127.0.0.1:{sim_port}/v1"
    return {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": upstream,
                       "limits": {"rpm": 4000, "tpm": 10_000_000, "max_concurrency": 256}}],
        "models": [{"name": "gpt-4o", "upstream": "sim"}],
        "request_log": {"enabled": True, "store": {"sqlite_path": str(db)}},
    }  # fmt: skip


def replay(args: argparse.Namespace, folder: Path) -> tuple[Path, dict[str, Any]]:
    """Run the trace through the gateway; the log's file and the bench result."""
    sim_port, port = free_port(), free_port()
    db = folder / "requests.sqlite3"
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config(port, sim_port, db)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    sim = subprocess.Popen([*LEVERGATE, "sim", "--port", str(sim_port), "--ttft-ms", "150",
                            "--prefill-ms-per-token", "0.05", "--tokens-per-second", "250",
                            "--jitter", "0.2"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    serve = subprocess.Popen([*LEVERGATE, "serve", "--config", str(config)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    result = folder / "bench.json"
    try:
        wait_port(sim_port, proc=sim)
        wait_port(port, proc=serve)
        bench = [*LEVERGATE, "bench", f"http://127.0.0.1:{port}/v1", "--trace", args.trace,
                 "--time-scale", str(args.time_scale), "--model", "gpt-4o", "--stream",
                 "--repeat-rate", "0.1", "--extra-body", '{"temperature": 0}', "--samples",
                 "--json-out", str(result), "--quiet", "--timeout", "60"]  # fmt: skip
        if args.requests:
            bench += ["--requests", str(args.requests)]
        subprocess.run(bench, env=env, check=True, stdout=subprocess.DEVNULL)
    finally:
        stop(serve, seconds=20)  # its close writes what the log still holds
        stop(sim)
    return db, json.loads(result.read_text())


def render(db: Path, out: Path, name: str, title: str, source: str) -> dict[str, Any]:
    """`levergate report` of the log, and the page's PNG preview when Chromium is here."""
    html, md = out / f"{name}.html", out / f"{name}.md"
    done = subprocess.run([*LEVERGATE, "report", "--db", str(db), "-o", str(html), "--markdown",
                           str(md), "--title", title, "--source", source, "--json"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is not None:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1400,1900",
                        f"--screenshot={out / f'{name}.png'}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="azure-code")
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--requests", type=int, default=None, help="stop after N requests")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.requests, args.time_scale = 40, 0.01
    reports = out.folder if args.smoke or args.out else REPORTS
    reports.mkdir(parents=True, exist_ok=True)
    name = f"{args.trace}-replay"
    with tempfile.TemporaryDirectory(prefix="levergate-azure-") as tmp:
        db, bench = replay(args, Path(tmp))
        title = f"Azure LLM trace 2023 ({args.trace}) through levergate, x{args.time_scale:g} time"
        source = (f"the request log of `benchmarks/azure_report.py --trace {args.trace} "
                  f"--time-scale {args.time_scale:g}`: the trace's arrivals and token counts, "
                  "synthetic text with 10% repeats, gpt-4o at temperature 0, streamed; the exact "
                  "cache and upstream limits on; prices from the built-in catalog")  # fmt: skip
        report = render(db, reports, name, title, source)
    data = {**stamp(), "trace": args.trace, "time_scale": args.time_scale,
            "bench": {k: bench[k] for k in ("sent", "ok", "errors", "target_rps",
                                            "achieved_rps", "total_ms", "ttft_ms")},
            "log": {"totals": report["totals"], "latency": report["latency"],
                    "levers": report["levers"]}}  # fmt: skip
    summary = (reports / f"{name}.md").read_text()
    out.write("azure_report", data, summary)


if __name__ == "__main__":
    main()
