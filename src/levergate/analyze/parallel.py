"""The replays of one analysis on two cores: they are independent (each configuration replays the
same requests from scratch), so half of them run in one forked child while this process runs the
other half. The child inherits the requests (nothing is copied or pickled going in); only its
summaries come back, as JSON through a pipe. Measured: benchmarks/results/analyze_speed.md.

Forking is used where it is safe and pays: on POSIX, for at least `MIN_REQUESTS` requests and two
replays or more, from the CLI (a single-threaded process). A child that fails is an error here,
never a silent half result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from levergate.core.json_bound import parse_json

__all__ = ["MIN_REQUESTS", "ReplayFailed", "run_all"]

MIN_REQUESTS = 20_000  # below this, the fork costs more than the second core saves

Job = Callable[[], dict[str, Any]]


class ReplayFailed(RuntimeError):
    """The forked child running half of the replays did not finish."""


def run_all(jobs: Sequence[Job], *, fork: bool) -> list[dict[str, Any]]:
    """Each job's result, in order; with `fork`, the second half in a child process."""
    if not fork or len(jobs) < 2 or not hasattr(os, "fork"):
        return [job() for job in jobs]
    half = len(jobs) // 2
    mine, theirs = jobs[:half], jobs[half:]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run its half, write it, leave without any cleanup of the parent's
        code = 1
        try:
            os.close(read)
            with os.fdopen(write, "wb") as out:
                out.write(orjson.dumps([job() for job in theirs]))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        found = [job() for job in mine]
    finally:
        with os.fdopen(read, "rb") as given:
            data = given.read()
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise ReplayFailed(f"a replay worker exited with status {status}")
    rest: list[dict[str, Any]] = parse_json(data)
    return found + rest
