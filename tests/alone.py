"""Tests that measure the machine run alone: `@pytest.mark.alone`.

`make test` runs one test file per core (pytest-xdist), so a test that compares two latencies
(the soak's victim p99 attacked / solo, issue 20's bound) measured them while another worker's
tests took the other core at moments of their own: on CI the ratio read 2.19x where it read
1.46-1.58x with the machine to itself. Every test of a run under xdist holds a shared lock on a
file of this run (`PYTEST_XDIST_TESTRUNUID`, set in each worker) while it runs; an `alone` test
holds it exclusively, so it starts once the other workers' running tests end, and theirs wait
for it. The waits happen before pytest-timeout starts a test's clock (conftest.py's hook wraps
pytest-timeout's).

A writer takes a gate first and keeps it while it waits, and a test takes the gate before its
shared lock (released at once), so a stream of short tests on the other worker cannot starve the
writer. A test marked `behind` only waits for work it started in the background (the benchmark
smoke runs) and takes no lock itself; each piece of that work takes its own turn, so an `alone`
test waits for the pieces running, not for all of them, and none waits on a writer that waits on
it. In one process (no xdist) nothing runs beside a test and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ALONE = "alone"
BEHIND = "behind"


def _files(run: str | None = None) -> tuple[Path, Path] | None:
    """The run's gate and lock: the run's id is in each worker's environment."""
    run = run or os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return None
    folder = Path(tempfile.gettempdir())
    return folder / f"levergate-tests-{run}.gate", folder / f"levergate-tests-{run}.lock"


def remove(run: str) -> None:
    """The run's files, once its workers are gone."""
    for path in _files(run) or ():
        path.unlink(missing_ok=True)


@contextmanager
def _locked(path: Path, how: int) -> Iterator[None]:
    with path.open("a") as file:
        fcntl.flock(file, how)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextmanager
def turn(alone: bool = False) -> Iterator[None]:
    """A test's turn (or a piece of its background work's): the run's lock shared, or, for an
    `alone` test, exclusive."""
    files = _files()
    if files is None:
        yield
        return
    gate, lock = files
    if alone:
        with _locked(gate, fcntl.LOCK_EX), _locked(lock, fcntl.LOCK_EX):
            yield
        return
    with ExitStack() as held:
        with _locked(gate, fcntl.LOCK_EX):
            held.enter_context(_locked(lock, fcntl.LOCK_SH))
        yield
