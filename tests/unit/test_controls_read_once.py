"""Controls are read from headers in one place: `control_headers.py` (and the tenant in
`principal.py`). No other module names a request control header, and no layer, cache, upstream
or policy looks inside the headers a call carries — it reads `ctx.controls` / `ctx.principal`
and may only hand the headers on (Authenticate to `identify`, a micro-batch to its merged call)."""

from __future__ import annotations

import ast
from pathlib import Path

import levergate
from levergate.control_headers import CONTROL_HEADERS
from levergate.principal import TENANT_HEADER

SRC = Path(levergate.__file__).parent
PARSERS = {SRC / "control_headers.py", SRC / "principal.py"}
REQUEST_CONTROLS = frozenset({*CONTROL_HEADERS, TENANT_HEADER})
# Below the edge: these see a `Call`, never a request.
BELOW_THE_EDGE = ("layers", "upstreams", "policies", "core", "stores", "batch")


def _modules() -> list[Path]:
    """The gateway's modules; `levergate.testing` is a client (its harnesses send controls)."""
    return sorted(p for p in SRC.rglob("*.py") if SRC / "testing" not in p.parents)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _named_controls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    return [
        f"{path.relative_to(SRC)}:{node.lineno} {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in skip and node.value.lower() in REQUEST_CONTROLS
    ]  # fmt: skip


def test_only_the_parsers_name_a_request_control_header() -> None:
    offenders = [hit for path in _modules() if path not in PARSERS for hit in _named_controls(path)]
    assert offenders == []


def _reads(node: ast.AST, parent: ast.AST) -> bool:
    """Whether `parent` looks inside `node` (subscript, .get/.items/..., `in`, iteration)."""
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return True
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return True
    if isinstance(parent, ast.Compare) and node in parent.comparators:
        return True
    return isinstance(parent, ast.For | ast.comprehension) and parent.iter is node


def _is_ctx(node: ast.expr) -> bool:
    """`<anything>.ctx` or a local named `ctx`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "ctx"
    return isinstance(node, ast.Name) and node.id == "ctx"


def _header_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for parent in ast.walk(tree)
        for node in ast.iter_child_nodes(parent)
        if isinstance(node, ast.Attribute) and node.attr == "headers"
        and _is_ctx(node.value) and _reads(node, parent)
    ]  # fmt: skip


def test_no_layer_looks_inside_the_calls_headers() -> None:
    below = [p for p in _modules() if p.relative_to(SRC).parts[0] in BELOW_THE_EDGE]
    assert [hit for path in below for hit in _header_reads(path)] == []


def test_the_check_sees_a_read_when_there_is_one() -> None:
    """The two checks above, shown to fail on the code they forbid."""
    tree = ast.parse("x = call.ctx.headers.get('a')\ny = 'b' in call.ctx.headers")
    reads = [
        node
        for parent in ast.walk(tree)
        for node in ast.iter_child_nodes(parent)
        if isinstance(node, ast.Attribute) and node.attr == "headers" and _reads(node, parent)
    ]
    assert len(reads) == 2
    assert "x-levergate-priority" in REQUEST_CONTROLS
