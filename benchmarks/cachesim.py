"""A callgrind output file's events beyond instructions, for `benchmarks/instructions.py
--cache-sim` (h/logmem, issue 23 §1): with `--cache-sim=yes` callgrind simulates the first-level
caches (I1, D1) and the last level (LL) and counts each reference's misses; with
`--branch-sim=yes` the conditional and indirect branches and their mispredictions. Like
instructions, these are deterministic (a simulated machine, not the host's load), so a request's
share is a difference of two runs (I(2N) - I(N)) / N like any other count.

What a count costs in cycles is not counted, only estimated: `CEST` weighs each event by a
typical penalty, the formula callgrind_annotate / KCachegrind's "Cycle Estimation" use
(Ir + 10 x L1 misses + 100 x LL misses, instruction and data alike), plus, with the branch
simulation, 10 x a mispredicted branch. An estimate: it says which of two versions of the same
code should take fewer cycles and where the misses go, not how long either takes.

`by_function` adds each function's exclusive events up (its own cost lines, not those of the
calls it makes), so that two runs' difference says where a request's instructions and misses
go; `category` groups functions into what they are (SQLite by layer, the sqlite3 module,
malloc, the garbage collector, the interpreter).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

L1_MISSES = ("I1mr", "D1mr", "D1mw")
LL_MISSES = ("ILmr", "DLmr", "DLmw")
MISPREDICTED = ("Bcm", "Bim")
WEIGHTS = {"L1": 10, "LL": 100, "branch": 10}  # cycles a miss, estimated (module docstring)
# The host's caches, a core's (an AMD EPYC, Zen 4: 32 KiB 8-way L1 each, 1 MiB 8-way L2), as
# callgrind's I1, D1 and LL: valgrind reads the LL from CPUID, which on this virtual machine says
# a 320 MiB direct-mapped L3 (it simulated 256 MiB), and a 1 MiB L2 is what a batch's rows and
# SQLite's pages are evicted from between the request and the write.
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,8,64")
SHOWN = ("Ir", "D1mr", "D1mw", "DLmr", "DLmw", "I1mr", "ILmr", "Bcm", "CEst")

_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
# SQLite's functions by layer, by name (first match wins).
_SQLITE_LAYERS = (
    ("WAL", re.compile(r"(?i)^(sqlite3)?wal")),
    ("pager / page cache", re.compile(r"(?i)^(sqlite3)?(pager|pcache|pcache1)|^pager|^page")),
    (
        "b-tree",
        re.compile(
            r"(?i)^(sqlite3)?btree|^balance|cell|^(allocate|free|clear|fill|"
            r"insert|drop|compute|defragment|rebuild|edit|decode|zero|move|get)"
            r"(Page|Cell|Space|Free|Overflow|ToRoot|ToChild|ToLeftmost|Flags)|"
            r"^btree|^unlockBtree|^saveAll|^copyNodeContent|^getAndInit"
        ),
    ),
    ("malloc (SQLite's)", re.compile(r"(?i)malloc|free|realloc|^mem\d|^sqlite3_msize|^measure")),
    (
        "VDBE / records",
        re.compile(
            r"(?i)vdbe|^sqlite3_(step|reset|bind|column)|record|^serial|"
            r"^sqlite3Mem|^sqlite3Put|^sqlite3Get"
        ),
    ),
)
_GC = re.compile(
    r"^(gc_|visit_|update_refs|subtract_refs|move_unreachable|deduce_unreachable|"
    r"move_legacy|handle_|finalize_|delete_garbage|_PyGC_|collect|"
    r"PyObject_GC_Track|_PyObject_GC_Link|validate_list|untrack)|traverse$"
)
_PYMALLOC = re.compile(
    r"^(_PyObject_(Malloc|Free|Realloc|Calloc)|pymalloc_|new_arena|"
    r"_PyMem_|PyMem_|PyObject_Malloc|PyObject_Free|address_in_range)"
)
_LIBC_MALLOC = re.compile(
    r"^(_int_|malloc|free|realloc|calloc|cfree|tcache|unlink_chunk|"
    r"sysmalloc|systrim|malloc_|__libc_(malloc|free|realloc|calloc)|"
    r"alloc_perturb|mremap_chunk|munmap_chunk|arena_get)"
)
_LIBC_MEM = re.compile(r"^__(mem|str)\w*(avx|sse|erms|evex)|^(memcpy|memmove|memset|memcmp)")


class Names:
    """A callgrind file's compressed names (`--compress-strings`): `(12) name` names 12 for its
    kind (`ob`, `fl`, `fn`), a later `(12)` means it again. Called with a line's text after
    `ob=` / `fn=` / `cob=` / `cfn=`, it returns the name."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], str] = {}

    def __call__(self, kind: str, text: str) -> str:
        found = _NAMED.match(text)
        if found is None:
            return text
        if found.group(2) is not None:
            self._known[kind, found.group(1)] = found.group(2)
        return self._known.get((kind, found.group(1)), "?")


def events(out: Path) -> dict[str, int]:
    """The run's totals, by event (its `events:` line against its `summary:` / `totals:`)."""
    names: list[str] = []
    totals: list[int] = []
    with out.open() as lines:
        for line in lines:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                totals = [int(v) for v in line.split()[1:]]
    if not names or not totals:
        raise RuntimeError(f"{out}: no events or totals")
    return dict(zip(names, totals + [0] * (len(names) - len(totals)), strict=True))


def cest(counts: Mapping[str, float]) -> float:
    """Estimated cycles (module docstring): Ir + 10 L1 misses + 100 LL misses (+ 10 a
    mispredicted branch, when simulated)."""
    return (counts.get("Ir", 0.0)
            + WEIGHTS["L1"] * sum(counts.get(e, 0.0) for e in L1_MISSES)
            + WEIGHTS["LL"] * sum(counts.get(e, 0.0) for e in LL_MISSES)
            + WEIGHTS["branch"] * sum(counts.get(e, 0.0) for e in MISPREDICTED))  # fmt: skip


def by_function(out: Path) -> dict[tuple[str, str], dict[str, int]]:
    """Each (object, function)'s exclusive events in one callgrind file."""
    name = Names()
    kinds: list[str] = []
    found: dict[tuple[str, str], list[int]] = {}
    obj = fn = ""
    skip = False  # the cost line after `calls=`: the call's inclusive cost, not this function's
    with out.open() as lines:
        for line in lines:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if skip:
                    skip = False
                    continue
                values = line.split()[1:]
                row = found.setdefault((obj, fn), [0] * len(kinds))
                for i, value in enumerate(values):
                    row[i] += int(value)
            elif line.startswith("ob="):
                obj = name("ob", line[3:].strip())
            elif line.startswith("fn="):
                fn = name("fn", line[3:].strip())
            elif line.startswith("cob="):
                name("ob", line[4:].strip())
            elif line.startswith("cfn="):
                name("fn", line[4:].strip())
            elif line.startswith("calls="):
                skip = True
            elif line.startswith("events:"):
                kinds = line.split()[1:]
    return {key: dict(zip(kinds, row, strict=True)) for key, row in found.items()}


def category(obj: str, fn: str) -> str:
    """What a function is, for the split of a request's events."""
    base = obj.rsplit("/", 1)[-1]
    if "libsqlite3" in base:
        layer = next((label for label, pattern in _SQLITE_LAYERS if pattern.search(fn)), "other")
        return f"SQLite: {layer}"
    if "_sqlite3" in base:
        return "sqlite3 module (binding, statements)"
    if base.startswith(("libc.", "libc-")):
        if _LIBC_MALLOC.match(fn):
            return "libc malloc / free"
        if _LIBC_MEM.match(fn):
            return "libc memcpy / memset / memcmp"
        return "libc other (system call wrappers, ...)"
    if _GC.search(fn):
        return "Python: garbage collector"
    if _PYMALLOC.match(fn):
        return "Python: pymalloc"
    if base.startswith(("python", "libpython")):
        return "Python: interpreter and objects"
    if base in {"???", ""}:
        return "unknown (no object)"
    return f"extension: {base.split('.', 1)[0]}"


Functions = Mapping[tuple[str, str], Mapping[str, float]]


def per_request(
    big: Functions, small: Functions, requests: int, *, key: Callable[[str, str], str] = category
) -> dict[str, dict[str, float]]:
    """(2N run - N run) / N by `key` (a category; `function`: each function), each event and
    `CEst`."""
    split: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sign, side in ((1, big), (-1, small)):
        for (obj, fn), counts in side.items():
            into = split[key(obj, fn)]
            for event, value in counts.items():
                into[event] += sign * value / requests
    return {name: {**counts, "CEst": cest(counts)} for name, counts in split.items()}


def function(obj: str, fn: str) -> str:
    """A function's name with its object's (`per_request`'s key for each function)."""
    return f"{obj.rsplit('/', 1)[-1]}:{fn}"


def minus(a: Mapping[str, Mapping[str, float]],
          b: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:  # fmt: skip
    """`a` - `b`, key by key and event by event (a side's split less another's)."""
    return {k: {e: a.get(k, {}).get(e, 0.0) - b.get(k, {}).get(e, 0.0)
                for e in {*a.get(k, {}), *b.get(k, {})}}
            for k in {*a, *b}}  # fmt: skip


def top(split: Mapping[str, Mapping[str, float]], event: str, most: int) -> Iterable[str]:
    """The `most` categories with the largest absolute `event`."""
    return sorted(split, key=lambda c: -abs(split[c].get(event, 0.0)))[:most]


def markdown(rows: Iterable[Mapping[str, object]], names: Iterable[str]) -> list[str]:
    """The tables of the rows counted with the simulations: each side's events a request, then
    the log's share (a logging side less off) by category and by function. `names`: the
    sides."""
    lines: list[str] = []
    named = {"off": "log off", "on": "log on (this tree)"}
    for row in rows:
        sides = [s for s in names if f"events_{s}" in row]
        if not sides:
            continue
        ev: dict[str, Mapping[str, float]] = {s: row[f"events_{s}"] for s in sides}  # type: ignore[misc]
        shown = [e for e in SHOWN if e in ev["off"]]
        lines += ["", (f"Events a request, {row['way']}, {row['kind']} (CEst = Ir + 10 x L1 "
                       "misses + 100 x LL misses + 10 x mispredicted branches):"), "",
                  "| side | " + " | ".join(shown) + " | CEst / off | log's CEst / its Ir |",
                  "|---|" + "---:|" * (len(shown) + 2)]  # fmt: skip
        for s in sides:
            e = ev[s]
            extra = (e["CEst"] - ev["off"]["CEst"]) / max(1.0, e["Ir"] - ev["off"]["Ir"])
            lines.append(f"| {named.get(s, s)} | " + " | ".join(f"{e[k]:,.1f}" for k in shown)
                         + f" | {e['CEst'] / (ev['off']['CEst'] or float('nan')):.4f}x | "
                         + ("" if s == "off" else f"{extra:.2f}") + " |")  # fmt: skip
        for s in sides[1:]:
            lines += _split_lines(row, s, named.get(s, s), shown)
    return lines


def _split_lines(row: Mapping[str, object], side: str, name: str, shown: list[str]) -> list[str]:
    lines = []
    for key, what in (("split", "category"), ("split_fn", "function, the 40 largest")):
        split: Mapping[str, Mapping[str, float]] = row[f"{key}_{side}"]  # type: ignore[assignment]
        lines += ["", f"{name} less off, a request, by {what}:", "",
                  f"| {what.split(',')[0]} | " + " | ".join(shown) + " |",
                  "|---|" + "---:|" * len(shown)]  # fmt: skip
        for k in top(split, "CEst", len(split)):
            if max(abs(split[k].get(e, 0.0)) for e in ("Ir", "CEst")) < 1:
                continue
            lines.append(f"| {k} | " + " | ".join(f"{split[k].get(e, 0.0):,.1f}" for e in shown)
                         + " |")  # fmt: skip
    return lines
