"""What every benchmark here needs: where its data and results live, a smoke mode, processes on
loopback and their CPU time, and results/<name>.json + .md stamped with the date and machine.

Data. The public data sets are read at run time from `../shared/data` beside the repository
(several are non-commercial: never copied in); `LEVERGATE_BENCH_DATA` names another folder, for
a checkout that does not sit beside it. A missing file stops the run with `MISSING` (exit 3) and
a message naming it, so the smoke test can tell a machine without the data from a broken
benchmark (and fails on it under CI=true).

Smoke mode. `--smoke` runs every benchmark end to end at tiny sizes, in seconds, to prove it
still runs (tests/e2e/test_benchmarks_smoke.py runs all of them in `make test`). Its numbers
measure nothing: they are marked `"smoke": true`, and go to `--out` (by default a new
temporary folder), never to `benchmarks/results/`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from levergate.testing.ports import free_port  # noqa: F401 - the benchmarks import it from here

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA_ENV = "LEVERGATE_BENCH_DATA"
# The exit status of a run that lacks its data or a tool (wrk): not a broken benchmark.
MISSING = 3
T = TypeVar("T")


def stamp() -> dict[str, str]:
    """When and where a run was made, for the head of its results."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
    }


def data_dir() -> Path:
    """`../shared/data` beside the repository, or `LEVERGATE_BENCH_DATA`."""
    named = os.environ.get(DATA_ENV)
    return Path(named) if named else ROOT.parent / "shared" / "data"


def data_file(relative: str) -> Path:
    """A file of the shared data, or exit `MISSING` naming where it was looked for."""
    path = data_dir() / relative
    if not path.is_file():
        missing(
            f"benchmark data not found: {path} (the data sets live in ../shared/data beside the "
            f"repository and are never copied into it; {DATA_ENV} names another folder)"
        )
    return path


def need_tool(name: str) -> str:
    """The path of an external tool, or exit `MISSING` naming it."""
    found = shutil.which(name)
    if found is None:
        missing(f"{name} is required and not installed (apt-get install -y {name})")
    return str(found)


def missing(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(MISSING)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """`--smoke` and `--out`, the same on every benchmark."""
    parser.add_argument(
        "--smoke", action="store_true",
        help="tiny sizes, seconds: checks that the benchmark runs; results go to --out",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="folder for <name>.json and .md (default benchmarks/results; a temporary folder "
        "with --smoke, which never writes benchmarks/results)",
    )  # fmt: skip


@dataclass(frozen=True)
class Output:
    """Where a run's results go, and whether they are a smoke run's."""

    folder: Path
    smoke: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace) -> Output:
        folder = args.out
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="levergate-smoke-")) if args.smoke else RESULTS
        if args.smoke and folder.resolve() == RESULTS.resolve():
            raise SystemExit("--smoke never writes benchmarks/results (its numbers are not a run)")
        return cls(folder=folder, smoke=args.smoke)

    def write(self, name: str, data: dict[str, Any], markdown: str) -> None:
        """<folder>/<name>.json and .md; the markdown is printed too."""
        if self.smoke:
            data = {**data, "smoke": True}
            markdown = f"**Smoke run: tiny sizes, not a measurement.**\n\n{markdown}"
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
        (self.folder / f"{name}.md").write_text(markdown)
        print(markdown)


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One 200 answer with a content-length off a keep-alive socket: its head (up to the blank
    line) and its body."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"answered {head.splitlines()[0]!r}")
    found = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
    if found is None:
        raise RuntimeError("an answer without content-length")
    while len(body) < int(found.group(1)):
        body += sock.recv(65536)
    return head, body


def wait_port(
    port: int, *, seconds: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Until something listens on the port; fails at once if `proc` (its server) exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {seconds:g} s")


def wait_http(url: str, *, data: bytes | None = None, seconds: float = 30.0) -> None:
    """Until `url` answers 200 (a POST of `data` when given)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, data=data, timeout=1) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200 within {seconds:g} s")


def stop(proc: subprocess.Popen[bytes], *, seconds: float = 10.0) -> None:
    """Terminate, and kill what does not exit in time."""
    proc.terminate()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(*pids: int) -> float:
    """User + system CPU time of the processes, from /proc (Linux)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def turned(sides: tuple[T, ...], n: int) -> tuple[T, ...]:
    """Round `n`'s order of `sides`: turned by one each round, so each side runs in each
    place in turn (a side always first would meet the host's state after a pause alone)."""
    k = n % len(sides)
    return sides[k:] + sides[:k]


def paired(on: list[float], off: list[float]) -> tuple[float, float, float]:
    """The median of `on / off` round by round, and its quartiles. A round's sides ran in the
    same minutes, so a host that slows down for a while (a shared VM's neighbours: rounds of
    one side here moved by 30-50% on 2026-12-05) moves both; the ratio of each side's median
    pairs nothing, and one slow stretch on one side moves it."""
    ratios = sorted(a / b for a, b in zip(on, off, strict=True))
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, _, high = statistics.quantiles(ratios, n=4, method="inclusive")
    return statistics.median(ratios), low, high
