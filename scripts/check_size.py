"""Fail when a source module passes 800 lines or a function passes 60 (STYLE.md's caps).

Run by `make lint`. Modules are counted in physical lines; a function from its `def` line to
its last line, decorators excluded, lines holding only a comment not counted (saying why costs
nothing), nested functions counted inside their parent and alone.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60


def problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n") + (not text.endswith("\n"))
    comments = {n for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")}
    if lines > MAX_MODULE_LINES:
        found.append(f"{path}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            length = end - node.lineno + 1 - sum(node.lineno < n <= end for n in comments)
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{path}:{node.lineno}: {node.name}() is {length} lines "
                    f"(at most {MAX_FUNCTION_LINES})"
                )
    return found


def main(roots: list[str]) -> int:
    found = [
        p for root in roots for path in sorted(Path(root).rglob("*.py")) for p in problems(path)
    ]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src"]))
