"""Every example under examples/ runs as a user runs it (`python examples/<name>.py`), against
the simulator it starts, and passes its own assertions: an example that rots fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
# Smaller sizes where an example takes them, so the suite stays quick.
ARGS = {"fanout_under_a_limit.py": ["--items", "100"]}


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.timeout(240)
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs_and_passes_its_own_checks(example: str, tmp_path: Path) -> None:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), *ARGS.get(example, [])],
        env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path, capture_output=True, text=True,
        timeout=200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr
