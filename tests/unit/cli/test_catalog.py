"""`levergate catalog`: the table as a configuration resolves it, and its errors at the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from levergate.cli.main import main


def test_the_table_lists_the_builtin_models_with_their_date(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert "checked 2026-12-01" in out
    line = next(row for row in out.splitlines() if row.startswith("gpt-4o-mini "))
    assert line.split()[:5] == ["gpt-4o-mini", "openai", "0.15", "0.6", "0.075"]


def test_a_config_overrides_and_resolves_each_alias(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "levergate.yaml"
    config.write_text(
        "upstreams: [{name: up, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "catalog: {gpt-4o: {price: {input: 2.0}}}\n"
        "models: [{name: smart, upstream: up, upstream_model: gpt-4o},"
        " {name: local, upstream: up}]\n"
    )
    assert main(["catalog", "--config", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["models"]["gpt-4o"]["price"]["input"] == 2.0
    assert data["aliases"]["smart"]["price"]["output"] == 10.0
    assert data["aliases"]["smart"]["context_window"] == 128000
    assert data["aliases"]["local"]["price"] is None


def test_an_entry_without_prices_is_an_error_at_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "levergate.yaml"
    config.write_text(
        "upstreams: [{name: up, base_url: 'http://127.0.0.1:9/v1'}]\n"
        "catalog: {mine: {context_window: 4096}}\n"
        "models: [{name: m, upstream: up, catalog: mine}]\n"
    )
    assert main(["catalog", "--config", str(config)]) == 2
    assert "'mine' has no prices" in capsys.readouterr().err
