"""tests/alone.py: an `alone` test waits for the tests running and goes before the ones that
arrive while it waits; in one process nothing is locked. Threads stand in for the workers (each
opens the lock files itself, so their flocks exclude each other as processes' do)."""

from __future__ import annotations

import fcntl
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests import alone
from tests.alone import turn


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A run of its own (not the suite's): its id, its lock files in `tmp_path`."""
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"unit-{uuid.uuid4().hex}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    files = alone._files()
    assert files is not None
    return files[0]


def held(gate: Path) -> bool:
    with gate.open("a") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(file, fcntl.LOCK_UN)
        return False


def test_alone_waits_for_the_running_and_goes_before_the_later(run: Path) -> None:
    order: list[str] = []
    running, release = threading.Event(), threading.Event()

    def shared(name: str, hold: bool) -> None:
        with turn():
            order.append(f"{name} in")
            if hold:
                running.set()
                release.wait(60)
            order.append(f"{name} out")

    def exclusive() -> None:
        with turn(alone=True):
            order.append("alone in")
            order.append("alone out")

    first = threading.Thread(target=shared, args=("first", True))
    first.start()
    assert running.wait(60)
    writer = threading.Thread(target=exclusive)
    writer.start()
    while not held(run):  # the writer holds the gate: it is waiting for `first`
        time.sleep(0.01)
    later = threading.Thread(target=shared, args=("later", False))
    later.start()
    assert order == ["first in"]
    release.set()
    for thread in (first, writer, later):
        thread.join(60)
    assert order == ["first in", "first out", "alone in", "alone out", "later in", "later out"]


def test_in_one_process_nothing_is_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert alone._files() is None
    with turn(alone=True), turn(alone=True):  # would deadlock if it locked
        pass
