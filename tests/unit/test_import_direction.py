"""The direction of imports between the core, the features and the server, pinned.

    core (everything else)  ↛  features (batch/)  ↛  server internals (handlers, edge, ...)
    server                  ↛  features
    only the composition root (levergate/app.py) and the tools import a feature

Every import counts: module level, under `TYPE_CHECKING` and inside functions, read from the
source with `ast` (importing would hide the lazy ones). A feature may use the server's surface
for features — `server.exchange` (Request, Response), `server.route` (Route, Routed),
`server.guards`, `server.params` — and nothing else of it. The tools beside the gateway (the
CLI, the simulator, the bench harness, the analyzer) may import anything. Without this,
gateway ↔ server ↔ batch was one 23-module cycle and `GatewayTransport(gw)` loaded the Batch
API even when off.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import levergate

SRC = Path(levergate.__file__).parent
FEATURES = ("levergate.batch", "levergate.requestlog", "levergate.dashboard")
SERVER = "levergate.server"
SURFACE = frozenset(f"{SERVER}.{name}" for name in ("exchange", "route", "guards", "params"))
ROOT = "levergate.app"
# The analyzer (`levergate analyze`) is a tool too: offline, never in a running gateway; it
# reads the request log's features and replays the levers' policies.
TOOLS = ("levergate.cli", "levergate.bench", "levergate.simulator", "levergate.analyze",
         "levergate.__main__")  # fmt: skip


def _within(module: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == p or module.startswith(p + ".") for p in packages)


def _name(path: Path) -> str:
    parts = ("levergate", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> frozenset[str]:
    return frozenset(_name(path) for path in SRC.rglob("*.py"))


def _targets(node: ast.AST) -> Iterator[str]:
    """The levergate modules an import statement loads (`from a import b` is `a.b` when b is
    a module)."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name.startswith("levergate"))
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("levergate"):
        module = node.module or ""
        subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in _modules()]
        yield from subs or [module]


@cache
def imports() -> dict[str, frozenset[str]]:
    graph = {}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[_name(path)] = frozenset(t for node in ast.walk(tree) for t in _targets(node))
    return graph


def _edges() -> Iterator[tuple[str, str]]:
    for source, targets in imports().items():
        for target in targets:
            yield source, target


def _core(module: str) -> bool:
    return not (_within(module, (*FEATURES, SERVER, ROOT, *TOOLS)))


def test_the_scan_sees_lazy_and_type_checking_imports() -> None:
    """A check that cannot fail is no check: the app's lazy import of batch is seen."""
    assert "levergate.batch.extension" in imports()[ROOT]
    assert "levergate.layers.measure.recorder" in imports()["levergate.extension"]


def test_the_core_imports_no_feature_and_no_server_module() -> None:
    wrong = [(s, t) for s, t in _edges() if _core(s) and _within(t, (*FEATURES, SERVER, ROOT))]
    assert wrong == []


def test_features_use_only_the_servers_surface() -> None:
    wrong = [
        (s, t) for s, t in _edges()
        if _within(s, FEATURES) and _within(t, SERVER) and t not in SURFACE
    ]  # fmt: skip
    assert wrong == []
    assert [(s, t) for s, t in _edges() if _within(s, FEATURES) and _within(t, TOOLS)] == []


def test_only_the_composition_root_imports_a_feature() -> None:
    """...and the tools, which may import anything (`levergate log` reads the request log's
    store)."""
    wrong = [
        (s, t) for s, t in _edges()
        if _within(t, FEATURES) and not _within(s, (*FEATURES, *TOOLS)) and s != ROOT
    ]  # fmt: skip
    assert wrong == []


def test_the_gateway_reaches_no_server_or_feature_module_however_indirectly() -> None:
    seen, todo = set(), ["levergate.gateway"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imports().get(module, ()))
    assert sorted(m for m in seen if _within(m, (*FEATURES, SERVER, ROOT))) == []


def test_the_in_process_transport_loads_no_feature_when_batch_is_off(tmp_path: Path) -> None:
    """At run time too: a fresh interpreter serving a call over `GatewayTransport` with batch
    off has not imported batch/ (with it on, `build_gateway` has)."""
    script = (
        "import sys, asyncio\n"
        "from levergate import Settings\n"
        "from levergate.app import build_gateway\n"
        "from levergate.server.transport import GatewayTransport\n"
        "import httpx\n"
        "async def main(on):\n"
        "    s = Settings.for_upstream('http://127.0.0.1:9/v1', batch={'enabled': on,\n"
        "        'dir': sys.argv[1], 'store': {'sqlite_path': sys.argv[1] + '/j.db'}})\n"
        "    async with build_gateway(s) as gw, httpx.AsyncClient(\n"
        "            transport=GatewayTransport(gw), base_url='http://lg') as http:\n"
        "        assert (await http.get('/healthz')).status_code == 200\n"
        "    return any(m.startswith('levergate.batch') for m in sys.modules)\n"
        "print(asyncio.run(main(False)), asyncio.run(main(True)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", script, str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
