"""`kind: anthropic` in the settings tree: how a YAML upstream becomes an
`AnthropicUpstreamSettings` and its endpoint, the headers it sends (x-api-key, anthropic-version,
anthropic-beta), one endpoint per key, the health probe's URL and headers, and the errors of a bad
entry."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from levergate.config import AnthropicUpstreamSettings, Settings
from levergate.errors import ConfigError
from levergate.upstreams import make_endpoint
from levergate.upstreams.anthropic import AnthropicUpstream, api_root, auth_headers
from levergate.upstreams.probe import HttpProbe
from levergate.upstreams.wire import HttpClient


def test_yaml_kind_anthropic_with_keys_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text(
        "upstreams:\n"
        "  - {kind: anthropic, name: claude, api_key_env: ANT_KEY, api_keys_env: [ANT_KEY2],\n"
        "     anthropic_beta: [prompt-caching-2024-07-31], default_max_tokens: 1024}\n"
        "models: [{name: sonnet, upstream: claude, upstream_model: claude-sonnet-4-5}]\n"
    )
    monkeypatch.setenv("ANT_KEY", "sk-ant-one")
    monkeypatch.setenv("ANT_KEY2", "sk-ant-two")
    upstream = Settings.load(path).upstreams[0]
    assert isinstance(upstream, AnthropicUpstreamSettings)
    assert upstream.base_url == "https://api.anthropic.com"
    assert upstream.anthropic_version == "2023-06-01"
    assert upstream.default_max_tokens == 1024
    assert [k.get_secret_value() for k in upstream.all_keys() if k] == ["sk-ant-one", "sk-ant-two"]
    assert "anthropic-ratelimit-*" in upstream.response_headers
    headers = auth_headers(upstream)
    assert headers == {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "prompt-caching-2024-07-31",
        "x-api-key": "sk-ant-one",
    }
    # The balancer makes one endpoint per key from a copy of the settings: still Anthropic.
    copy = upstream.model_copy(update={"api_key": SecretStr("sk-ant-two"), "name": "claude/key1"})
    endpoint = make_endpoint(copy)
    assert isinstance(endpoint, AnthropicUpstream)
    assert endpoint._headers["x-api-key"] == "sk-ant-two"
    assert "authorization" not in endpoint._headers


@pytest.mark.parametrize(
    ("base_url", "root"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("https://api.anthropic.com/", "https://api.anthropic.com"),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9"),
    ],
)
def test_base_url_is_the_api_root(base_url: str, root: str) -> None:
    assert api_root(AnthropicUpstreamSettings(name="a", base_url=base_url)) == root


def test_bad_entries_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="anthropic"):
        Settings.load(upstreams=[{"kind": "anthropic", "name": "a", "default_max_tokens": 0}])
    with pytest.raises(ConfigError):
        Settings.load(upstreams=[{"kind": "anthropic", "name": "a", "base_url": "ftp://x"}])


class _NoClient:
    async def request(self, *_: object, **__: object) -> object:  # pragma: no cover - unused
        raise AssertionError

    async def aclose(self) -> None:
        pass


def test_the_health_probe_speaks_anthropic() -> None:
    upstream = AnthropicUpstreamSettings(name="a", base_url="http://127.0.0.1:9/v1")

    def client(_: object) -> HttpClient:
        return _NoClient()  # type: ignore[return-value]

    probe = HttpProbe.of(
        upstream, SecretStr("sk-ant-k"), path="/models", timeout=1.0, http_client=client
    )
    assert probe.url == "http://127.0.0.1:9/v1/models"
    assert probe._headers == {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-k"}
