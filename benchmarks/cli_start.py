"""How long `levergate <command>` takes to start: the lazy CLI against the eager one, one run.

Each round starts every command once per variant, alternating, and measures the wall time of
the process and, in a second process with `python -X importtime`, the total time spent importing
(the sum of every module's own import time) and the number of modules imported.

Variants: `levergate`, this tree's CLI (imports only the invoked subcommand's module, and
`import levergate` resolves its public names on first use); `eager`, the same tree made to
import what the CLI did before (every public name of `levergate`, then every subcommand's
module via `build_parser()`); with `--before SRC`, the CLI of another source tree (e.g.
`git archive main src | tar -x -C /tmp/before` then `--before /tmp/before/src`).
Writes benchmarks/results/cli_start.{json,md}.

    .venv/bin/python benchmarks/cli_start.py [--rounds 10] [--before SRC] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import ROOT, Output, add_output_options, stamp

COMMANDS = (
    ("--help",),
    ("batch", "status", "--help"),
    ("config", "check", "--help"),
    ("log", "query", "--help"),
)
LAZY = "import sys\nfrom levergate.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
EAGER = (
    "import sys, levergate\n"
    "for name in levergate.__all__: getattr(levergate, name)\n"
    "from levergate.cli.main import build_parser\n"
    "args = build_parser().parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


def variants(before: Path | None) -> dict[str, tuple[str, str]]:
    """name -> (the launcher's code, its PYTHONPATH)."""
    found = {"levergate": (LAZY, str(ROOT / "src")), "eager": (EAGER, str(ROOT / "src"))}
    if before is not None:
        found["before"] = (LAZY, str(before.resolve()))
    return found


def start(code: str, path: str, argv: tuple[str, ...], *, importtime: bool) -> tuple[float, str]:
    """One start: its wall time in seconds and its stderr."""
    flags = ["-X", "importtime"] if importtime else []
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *flags, "-c", code, *argv], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "100"}, timeout=120, check=False,
    )  # fmt: skip
    took = time.perf_counter() - began
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stderr


def imports(stderr: str) -> tuple[float, int]:
    """`-X importtime`'s total (seconds, the sum of each module's own time) and module count."""
    own = [
        int(line.split("|")[0].removeprefix("import time:"))
        for line in stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    ]
    return sum(own) / 1e6, len(own)


def measure(rounds: int, commands: tuple[tuple[str, ...], ...], before: Path | None) -> list[Any]:
    runs = variants(before)
    samples: dict[tuple[str, str], dict[str, list[float]]] = {
        (" ".join(argv), name): {"wall": [], "imports": [], "modules": []}
        for argv in commands
        for name in runs
    }
    for number in range(rounds):
        order = list(runs.items())
        if number % 2:
            order.reverse()  # alternate which variant starts first
        for argv in commands:
            for name, (code, path) in order:
                sample = samples[(" ".join(argv), name)]
                sample["wall"].append(start(code, path, argv, importtime=False)[0])
                total, count = imports(start(code, path, argv, importtime=True)[1])
                sample["imports"].append(total)
                sample["modules"].append(count)
    return [
        {"command": command, "variant": name, "rounds": rounds,
         "wall_ms": round(statistics.median(s["wall"]) * 1e3, 1),
         "imports_ms": round(statistics.median(s["imports"]) * 1e3, 1),
         "modules": int(statistics.median(s["modules"]))}
        for (command, name), s in samples.items()
    ]  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    base = {r["command"]: r for r in rows if r["variant"] == "eager"}
    lines = [
        "| `levergate …` | variant | wall ms | imports ms | modules | wall vs eager |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["wall_ms"] / base[r["command"]]["wall_ms"]
        lines.append(
            f"| `{r['command']}` | {r['variant']} | {r['wall_ms']} | {r['imports_ms']} "
            f"| {r['modules']} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--before", type=Path, help="another tree's src/, measured alongside")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rounds, commands = (1, COMMANDS[:1]) if args.smoke else (args.rounds, COMMANDS)
    rows = measure(rounds, commands, args.before)
    meta = {**stamp(), "rounds": rounds}
    markdown = (
        f"# CLI start: lazy vs eager imports\n\n{rounds} rounds, alternating; each cell the "
        "median of the rounds. `imports ms`: the sum of every module's own time under "
        "`python -X importtime` (a second process). eager = this tree importing what the CLI "
        "imported before (every public name, every subcommand's module).\n\n"
        f"{table(rows)}\n"
    )
    out.write("cli_start", {**meta, "rows": rows}, markdown)


if __name__ == "__main__":
    main()
