"""benchmarks/cachesim.py reads callgrind's files right: a function's exclusive events (its own
cost lines, not the inclusive cost line after each `calls=`), names given once and then by
number, and the run's totals; the estimate's weights (h/logmem, issue 23 §1)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"

# A run in callgrind's format: `main` in python calls `sqlite3_step` (libsqlite3) twice from
# two lines, and `malloc` (libc) once; the cost line after each `calls=` is the call's inclusive
# cost, which is the callee's, not `main`'s.
FILE = """\
# callgrind format
version: 1
positions: line
events: Ir D1mr DLmr Bcm

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) main
10 100 4 1 2
cob=(2) /usr/lib/x86_64-linux-gnu/libsqlite3.so.0
cfi=(2) sqlite3.c
cfn=(2) sqlite3_step
calls=1 50
+1 700 30 3 9
+2 20 1
cob=(2)
cfi=(2)
cfn=(2)
calls=1 50
* 300 10 1 1
cob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6
cfi=(3) malloc.c
cfn=(3) malloc
calls=1 5
-3 40 2

ob=(2)
fl=(2)
fn=(2)
50 1000 40 4 10

ob=(3)
fl=(3)
fn=(3)
5 40 2

totals: 1160 47 5 12
"""


def cachesim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cachesim", BENCHMARKS / "cachesim.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exclusive_events_by_function(tmp_path: Path) -> None:
    sim = cachesim()
    out = tmp_path / "run.callgrind"
    out.write_text(FILE)
    found = sim.by_function(out)
    python = "/usr/lib/libpython3.11.so.1.0"
    assert found[python, "main"] == {"Ir": 120, "D1mr": 5, "DLmr": 1, "Bcm": 2}
    assert found["/usr/lib/x86_64-linux-gnu/libsqlite3.so.0", "sqlite3_step"]["Ir"] == 1000
    assert found["/usr/lib/x86_64-linux-gnu/libc.so.6", "malloc"] == {
        "Ir": 40, "D1mr": 2, "DLmr": 0, "Bcm": 0,
    }  # fmt: skip
    assert sum(f["Ir"] for f in found.values()) == sim.events(out)["Ir"]
    assert sim.events(out) == {"Ir": 1160, "D1mr": 47, "DLmr": 5, "Bcm": 12}


def test_split_by_category_and_the_estimate(tmp_path: Path) -> None:
    sim = cachesim()
    out = tmp_path / "run.callgrind"
    out.write_text(FILE)
    split = sim.per_request(sim.by_function(out), {}, 2)
    assert split["SQLite: VDBE / records"]["Ir"] == 500
    assert split["libc malloc / free"]["D1mr"] == 1
    assert split["Python: interpreter and objects"]["CEst"] == 60 + 10 * 2.5 + 100 * 0.5 + 10 * 1
    # Ir + 10 a first-level miss + 100 a last-level miss + 10 a mispredicted branch
    assert sim.cest({"Ir": 1, "I1mr": 1, "D1mw": 1, "ILmr": 1, "DLmw": 1, "Bim": 1}) == 231
