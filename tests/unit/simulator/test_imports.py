"""The simulator is a server of its own, a stand-in for a hosted provider: it shares the wire
formats and the settings' vocabulary with the gateway but none of its machinery, so a fault in
the gateway cannot hide behind the same fault in its test double. Pinned here on the source
(every import statement, including TYPE_CHECKING and function-level ones), both ways."""

from __future__ import annotations

import ast
from pathlib import Path

import levergate

SRC = Path(levergate.__file__).parent
SIMULATOR = SRC / "simulator"
# What the simulator may use of levergate: the settings' base types, the clock, the exception
# tree, pure policies and the wire formats. Never the gateway, its layers, server, upstreams,
# stores or batch runner.
ALLOWED = ("levergate.simulator", "levergate.config", "levergate.core.clock", "levergate.errors",
           "levergate.policies", "levergate.protocol")  # fmt: skip
# `python -m levergate.simulator` is the CLI's `levergate sim`.
ENTRY_POINT = {"__main__.py": ("levergate.cli.sim",)}
# Who may start a simulator: the CLI (`levergate sim`, `serve --simulate`), nothing else in src;
# the what-if analyzer reads the simulator's models of a provider (its prompt cache's settings,
# its token counts) to replay a log against them, and starts none.
USERS = ("levergate.simulator", "levergate.cli", "levergate.analyze")


def imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "levergate" or name.startswith("levergate.")}


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_name(path: Path) -> str:
    return ".".join(("levergate", *path.relative_to(SRC).with_suffix("").parts))


def test_the_simulator_imports_only_the_shared_vocabulary_of_levergate() -> None:
    wrong = {}
    for path in sorted(SIMULATOR.rglob("*.py")):
        allowed = ALLOWED + ENTRY_POINT.get(path.name, ())
        bad = {name for name in imported(path) if not within(name, allowed)}
        if bad:
            wrong[str(path.relative_to(SRC))] = sorted(bad)
    assert wrong == {}


def test_only_the_cli_starts_a_simulator() -> None:
    users = {
        module_name(path)
        for path in SRC.rglob("*.py")
        if any(within(name, ("levergate.simulator",)) for name in imported(path))
    }
    assert users, "the scan found no importer at all: it is not looking where the code is"
    assert {u for u in users if not within(u, USERS)} == set()


def test_the_scan_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from levergate.gateway import Gateway\n"
        "def f():\n    import levergate.server.app\n"
    )
    assert {"levergate.gateway", "levergate.server.app"} <= imported(source)
    assert not within("levergate.gateway", ALLOWED)
