"""Every benchmark under benchmarks/ runs end to end in its smoke mode (`--smoke`: tiny sizes,
seconds each), so a change that breaks one fails `make test` instead of waiting for the next
person who runs it (`benchmarks/trim.py` crashed on main: its hand-made stand-in for the
pipeline's shared state lacked the model catalog).

Each runs as a user runs it (`python benchmarks/<name>.py`), with this tree's `src` first on
the path, writing to a temporary folder, two at a time; `benchmarks/results/` must be left as it
was. A run that lacks its data (`../shared/data` beside the repository, never copied in) or a
tool (wrk) exits 3 saying which: skipped outside CI with that reason, a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.alone import turn
from tests.required import missing

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
MISSING = 3  # benchmarks/harness.py: MISSING, a run without its data or a tool
# Modules the benchmarks import or start, exercised through the benchmarks that do.
HELPERS = {
    "harness.py": "imported by every benchmark",
    "local_common.py": "imported by the local_*.py benchmarks",
    "traffic_common.py": "imported by the traffic benchmarks; its __main__ is "
    "traffic_shared_limit.py's logged simulator",
    "relay.py": "the null proxy overhead.py runs beside the gateway",
    "bare_relay.py": "the bare HTTP relay relay_side_by_side.py runs beside the gateway",
    "inprocess_cpu.py": "run by anthropic_inbound.py and log_ab.py, imported by ledger_ab.py; its "
    "`served` harness by otel_ab.py, otel_where.py and log_breakdown.py",
    "analyze_workloads.py": "imported by analyze_accuracy.py",
    "cachesim.py": "imported by instructions.py (its --cache-sim, which its smoke runs)",
}
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)


# Runs at once: most of a smoke run waits (servers starting, simulated latency, rate windows),
# so two overlap well on two cores.
WORKERS = 2


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.iterdir())}


def run_smoke(script: str, out: Path) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True)
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    with turn():  # not while an `alone` test runs (tests/alone.py)
        return subprocess.run(
            [sys.executable, str(BENCHMARKS / script), "--smoke", "--out", str(out / "results")],
            env={**os.environ, "PYTHONPATH": path},
            cwd=out,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )


@dataclass(frozen=True)
class Smoke:
    """The selected benchmarks' smoke runs, started together when the first test asks, each
    test waiting for its own; and benchmarks/results/ as it was before any of them ran."""

    runs: dict[str, Future[subprocess.CompletedProcess[str]]]
    outs: Path
    results: dict[str, tuple[int, int]]


@pytest.fixture(scope="module")
def smoke(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Smoke]:
    wanted = [str(item.callspec.params["script"]) for item in request.session.items
              if isinstance(item, pytest.Function)
              and item.originalname == "test_benchmark_runs_in_smoke_mode"]  # fmt: skip
    outs = tmp_path_factory.mktemp("smoke")
    results = snapshot(RESULTS)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        runs = {name: pool.submit(run_smoke, name, outs / name) for name in wanted}
        try:
            yield Smoke(runs=runs, outs=outs, results=results)
        finally:
            for run in runs.values():
                run.cancel()


def test_every_benchmark_has_a_smoke_mode() -> None:
    """A new benchmark gets the shared options (and so a smoke run here) or is a named helper."""
    assert set(HELPERS) <= {p.name for p in BENCHMARKS.glob("*.py")}
    assert len(SCRIPTS) >= 20
    lacking = [name for name in SCRIPTS
               if "add_output_options(parser)" not in (BENCHMARKS / name).read_text()]  # fmt: skip
    assert lacking == []


@pytest.mark.slow
@pytest.mark.behind  # the smoke runs take their own turns (tests/alone.py)
# A test waits for its run, which waits for the runs before it (each at most 240 s) and for any
# `alone` test that takes its turn meanwhile (the soak: at most 900 s): not 300 s of its own.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_in_smoke_mode(script: str, smoke: Smoke) -> None:
    done = smoke.runs[script].result()
    said = f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}"
    if done.returncode == MISSING:
        missing(f"every benchmark must run: {said}")
    assert done.returncode == 0, said
    written = sorted((smoke.outs / script / "results").glob("*.json"))
    assert written, f"{script} wrote no results:\n{done.stdout[-2000:]}"
    for result in written:
        assert json.loads(result.read_text())["smoke"] is True
        assert result.with_suffix(".md").read_text().strip()
    assert snapshot(RESULTS) == smoke.results, "a smoke run changed benchmarks/results"


def test_smoke_never_writes_the_committed_results(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "affinity.py"), "--smoke", "--out", str(RESULTS)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--smoke never writes benchmarks/results" in done.stderr
