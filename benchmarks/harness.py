"""What every benchmark here needs: run processes on loopback, read their CPU time, and write
results/<name>.json + .md stamped with the date and the machine."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def stamp() -> dict[str, str]:
    """When and where a run was made, for the head of its results."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
    }


def write_results(name: str, data: dict[str, Any], markdown: str) -> None:
    """results/<name>.json and results/<name>.md; the markdown is printed too."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
