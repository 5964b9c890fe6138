from __future__ import annotations

from pathlib import Path

import pytest

from levergate.config import WILDCARD, PriceSettings, Settings, UpstreamSettings
from levergate.errors import ConfigError


def test_defaults_load_without_a_file() -> None:
    settings = Settings.load()
    assert settings.server.port == 8080
    assert settings.upstreams == []


def test_yaml_file_and_environment_merge_with_the_environment_winning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text(
        "server: {port: 9000, host: 0.0.0.0}\n"
        "upstreams: [{name: a, base_url: 'http://127.0.0.1:1/v1', api_key_env: A_KEY}]\n"
        "models: [{name: fast, upstream: a, upstream_model: tiny, price: {input: 1, output: 2}}]\n"
    )
    monkeypatch.setenv("LEVERGATE_SERVER__PORT", "9100")
    monkeypatch.setenv("A_KEY", "sk-secret")
    settings = Settings.load(path)
    assert settings.server.port == 9100
    assert settings.server.host == "0.0.0.0"
    upstream = settings.upstreams[0]
    assert isinstance(upstream, UpstreamSettings)
    key = upstream.api_key
    assert key is not None
    assert key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings)
    assert settings.models[0].upstream_model == "tiny"


def test_code_values_merge_into_the_file_instead_of_replacing_sections(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {host: 0.0.0.0, max_body_bytes: 4096}\n")
    settings = Settings.load(path, server={"port": 1234})
    assert (settings.server.host, settings.server.port, settings.server.max_body_bytes) == (
        "0.0.0.0", 1234, 4096,
    )  # fmt: skip


def test_for_upstream_routes_every_model_to_one_url() -> None:
    settings = Settings.for_upstream("http://127.0.0.1:8000/v1/")
    upstream = settings.upstreams[0]
    assert isinstance(upstream, UpstreamSettings)
    assert upstream.base_url == "http://127.0.0.1:8000/v1"
    assert [m.name for m in settings.models] == [WILDCARD]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("server: [1, 2]\n", "server"),
        ("server: {port: 'x'}\n", "server.port"),
        ("server: {prot: 1}\n", "server.prot"),
        ("models: [{name: m, upstream: nowhere}]\n", "unknown upstream"),
        ("upstreams: [{name: a, base_url: 'ftp://x'}]\n", "http"),
        ("- a\n- b\n", "mapping"),
        ("server: {port: [\n", "not valid YAML"),
    ],
)
def test_bad_files_give_one_clear_config_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        Settings.load(path)
    assert fragment in caught.value.message


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.load(tmp_path / "absent.yaml")


def test_price_takes_the_earlier_cached_input_name_and_overrides_field_by_field() -> None:
    old = PriceSettings.model_validate({"input": 1.0, "output": 4.0, "cached_input": 0.1})
    assert old.cache_read == 0.1
    over = PriceSettings.model_validate({"input": 2.0}).over(old)
    assert (over.input, over.output, over.cache_read) == (2.0, 4.0, 0.1)


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"admin": {"enabled": True}}, "admin.token of at least 16"),
        ({"admin": {"enabled": True, "token": "short"}}, "admin.token of at least 16"),
        (
            {"auth": {"keys": [{"key": "a", "name": "x"}, {"key": "b", "name": "x"}]}},
            "names must be unique",
        ),
    ],
)
def test_the_admin_api_needs_a_real_token_and_config_keys_unique_names(
    values: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        Settings.load(path=None, **values)


def test_the_admin_token_comes_from_the_environment_and_never_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEVERGATE_ADMIN__TOKEN", "env-admin-token-0123")
    settings = Settings.load(admin={"enabled": True})
    assert settings.admin.token is not None
    assert settings.admin.token.get_secret_value() == "env-admin-token-0123"
    assert "env-admin-token-0123" not in repr(settings)


def test_every_api_key_from_the_environment_is_read_once_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`api_keys_env` like `api_key_env`: the keys a gateway balances over are the ones it
    loaded with, whatever the environment says later."""
    monkeypatch.setenv("LG_TEST_KEY", "k-main")
    monkeypatch.setenv("LG_TEST_KEY_1", "k-one")
    monkeypatch.setenv("LG_TEST_KEY_2", "k-two")
    upstream = UpstreamSettings(
        name="p",
        base_url="http://127.0.0.1:9/v1",
        api_key_env="LG_TEST_KEY",
        api_keys_env=["LG_TEST_KEY_1", "LG_TEST_KEY_2", "LG_TEST_UNSET"],
    )
    monkeypatch.setenv("LG_TEST_KEY", "k-changed")
    monkeypatch.setenv("LG_TEST_KEY_1", "k-changed")
    monkeypatch.delenv("LG_TEST_KEY_2")
    keys = [k.get_secret_value() for k in upstream.all_keys() if k is not None]
    assert keys == ["k-main", "k-one", "k-two"]
    renamed = upstream.model_copy(update={"name": "p/key0"})  # how per-key transports are made
    assert [k.get_secret_value() for k in renamed.all_keys() if k is not None] == keys
