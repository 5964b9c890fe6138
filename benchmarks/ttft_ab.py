"""Two checkouts of levergate side by side: TTFT at the socket through each, in front of one
simulator, in alternating rounds, so both see the same machine at the same moments. The A/B
for "did this change slow the first token?", which separate runs on a noisy host cannot settle.

    python benchmarks/ttft_ab.py --old ../old-checkout/src [--new src] [--rounds 8]
    python benchmarks/ttft_ab.py --smoke     # tiny: this tree against itself

Writes benchmarks/results/ttft_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from harness import ROOT, Output, add_output_options, free_port, stamp, stop, wait_port
from overhead import socket_ttft


def _start(args: list[str], src: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": src}
    return subprocess.Popen([sys.executable, "-m", "levergate.cli.main", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def compare(
    old: str, new: str, *, latency_ms: int, rounds: int, requests: int
) -> dict[str, list[float]]:
    sim_port = free_port()
    sim = _start(["sim", "--port", str(sim_port), "--ttft-ms", str(latency_ms)], new)
    ports = {"old": free_port(), "new": free_port()}
    upstream = f"http://127.0.0.1:{sim_port}/v1"
    gateways: dict[str, subprocess.Popen[bytes]] = {}
    try:
        wait_port(sim_port, proc=sim)
        for name, src in (("old", old), ("new", new)):
            args = ["serve", "--upstream", upstream, "--port", str(ports[name])]
            gateways[name] = _start(args, src)
            wait_port(ports[name], proc=gateways[name])
        seen: dict[str, list[float]] = {"old": [], "new": []}
        for round_ in range(rounds):
            # Which gateway goes first alternates: the first of a pair measured ~0.08 ms apart
            # from the second with the same code on both sides (a bias, not the code).
            for name in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                seen[name].append(socket_ttft(ports[name], requests=requests))
        return seen
    finally:
        for gateway in gateways.values():
            stop(gateway)
        stop(sim)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", help="the src/ folder of the other checkout (required)")
    parser.add_argument("--new", default=str(ROOT / "src"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--latency", type=int, action="append", help="upstream ms (0 and 50)")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    requests = 30
    if args.smoke:  # this tree on both sides
        args.old, args.rounds, args.latency, requests = args.new, 2, [0], 6
    if args.old is None:
        parser.error("--old is required (the src/ folder of the other checkout)")
    rows = []
    for latency in args.latency or (0, 50):
        seen = compare(args.old, args.new, latency_ms=latency, rounds=args.rounds,
                       requests=requests)  # fmt: skip
        old, new = statistics.median(seen["old"]), statistics.median(seen["new"])
        wins = sum(n > o for o, n in zip(seen["old"], seen["new"], strict=True))
        rows.append({"upstream_ms": latency, "old_p50_ms": old, "new_p50_ms": new,
                     "new_minus_old_ms": new - old, "rounds_new_slower": wins, **seen})  # fmt: skip
    meta = stamp()
    lines = [
        f"# TTFT at the socket, two checkouts side by side ({meta['date']}, {meta['machine']})",
        "",
        f"Median over {args.rounds} rounds of {requests} streamed requests (p50 of each), one",
        "simulator behind both gateways, concurrency 1; which gateway goes first alternates by",
        "round.",
        "",
        "| upstream | old p50 ms | new p50 ms | new - old | rounds where new was slower |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['upstream_ms']} ms | {r['old_p50_ms']:.3f} | {r['new_p50_ms']:.3f} | "
        f"{r['new_minus_old_ms']:+.3f} | {r['rounds_new_slower']} of {args.rounds} |"
        for r in rows
    ]
    out.write("ttft_ab", {**meta, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
