"""The configuration reference and the JSON Schema, generated from the settings modules: the
committed docs/configuration.md must be what the generator writes today, every field of the tree
must be in it, and the schema must accept a real configuration and refuse a broken one."""

from __future__ import annotations

import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from levergate.config import ServerSettings, Settings, UpstreamSettings
from levergate.config.reference import field_texts, render, schema, sections
from levergate.version import __version__

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
EXAMPLE = """
server: {host: 127.0.0.1, port: 8080, access_log: true, drain_seconds: 5}
upstreams:
  - {name: openai, base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY}
  - {kind: anthropic, name: claude}
  - {kind: local, name: engine}
models:
  - {name: fast, upstream: engine}
  - {name: smart, upstream: openai, upstream_model: gpt-4o, price: {input: 2.5, output: 10}}
traffic: {health_checks: {enabled: true}, tenants: {acme: {rpm: 60}}}
cascade: {cascades: [{name: qa, steps: [fast, smart], checks: [{kind: mean_logprob}]}]}
log_format: json
"""


def test_the_committed_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `levergate config reference -o "
        "docs/configuration.md` and commit it"
    )


def test_every_field_of_every_section_is_in_the_reference() -> None:
    found = sections()
    models = {section.model for section in found}
    assert {Settings, ServerSettings, UpstreamSettings} <= models
    for section in found:
        assert [row.name for row in section.rows] == list(section.model.model_fields)
    text = render()
    rows = sum(len(section.rows) for section in found)
    assert rows > 400
    assert text.count("\n| `") == rows


def test_field_texts_come_from_the_comments_above_and_beside_a_field() -> None:
    texts = field_texts(ServerSettings)
    assert texts["max_headers"].startswith("Header lines in a request head: 431 above it")
    assert texts["port"] == "0: any free port"  # a comment at the end of its line
    # Inherited fields keep their parent's text; a pragma comment is not text.
    from levergate.config import AnthropicUpstreamSettings

    assert (
        field_texts(AnthropicUpstreamSettings)["api_key_env"]
        == field_texts(UpstreamSettings)["api_key_env"]
    )
    assert all("fmt:" not in text and "type: ignore" not in text for text in texts.values())


def test_defaults_computed_from_the_machine_are_written_as_what_they_mean() -> None:
    text = render()
    assert "`$XDG_CACHE_HOME/levergate/cache.sqlite3`" in text
    assert str(Path.home()) not in text


def test_the_schema_accepts_a_real_configuration_and_describes_its_fields() -> None:
    document = schema()
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.validate(yaml.safe_load(EXAMPLE), document)
    server = document["$defs"]["ServerSettings"]["properties"]
    assert "431" in server["max_headers"]["description"]
    assert "draining" in server["drain_seconds"]["description"]


@pytest.mark.parametrize(
    "broken",
    ["server: {port: 70000}", "server: {prot: 1}", "log_format: xml", "models: [{upstream: a}]"],
)
def test_the_schema_refuses_what_the_settings_refuse(broken: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(broken), schema())


def test_the_version_is_pyprojects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert __version__ == project["version"]
