"""The user guide and API reference build (scripts/api_docs.py: mkdocs + mkdocstrings, strict)
with no warning, document every name of the pinned public surface and the library's fan-out,
workflow and sync client, resolve the guide's references into the reference, and fail on a
reference that does not resolve; the docstrings' examples run (doctest): the documentation
cannot rot unnoticed."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from pathlib import Path

import pytest

import levergate
from levergate import fanout, workflow
from tests.required import module

ROOT = Path(__file__).resolve().parents[2]


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def _build(*args: str) -> subprocess.CompletedProcess[str]:
    module("mkdocstrings_handlers.python")
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_docs.py"), *args],
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def test_the_site_builds_clean_and_documents_the_surface(tmp_path: Path) -> None:
    done = _build("--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    top = _page(tmp_path, "reference/levergate")
    assert [name for name in levergate.__all__ if f'id="levergate.{name}"' not in top] == []
    gateway = _page(tmp_path, "reference/gateway")
    for method in ("map", "imap", "workflow", "chat", "embed"):
        assert f'id="levergate.gateway.Gateway.{method}"' in gateway
    assert 'id="levergate.sync.SyncGateway.map"' in _page(tmp_path, "reference/sync")
    assert 'id="levergate.workflow.Workflow.gather"' in _page(tmp_path, "reference/workflow")
    # The guide is the modules' own documentation, its references resolved into the reference.
    guide = _page(tmp_path, "guide")
    assert "Bounded fan-out" in guide
    assert 'href="../reference/gateway/#levergate.gateway.Gateway.map"' in guide
    assert (tmp_path / "search" / "search_index.json").stat().st_size > 0


def test_a_reference_that_does_not_resolve_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("See [`Gateway.nope`][levergate.gateway.Gateway.nope].\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        "site_name: t\ndocs_dir: docs\nplugins:\n  - mkdocstrings:\n      handlers:\n"
        f"        python:\n          paths: [{ROOT / 'src'}]\n"
    )
    done = _build("--out", str(tmp_path / "site"), "--config", str(config))
    assert done.returncode == 1
    assert "levergate.gateway.Gateway.nope" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("module", [fanout, workflow])
def test_the_docstring_examples_run(module: object) -> None:
    failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert tried > 0
    assert failed == 0
