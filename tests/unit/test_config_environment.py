"""Where a setting comes from: explicit values (flags, code) > `LEVERGATE_*` environment > file >
defaults; a bad value from the environment names its variable; a variable that names no section
is reported; a key variable the configuration names must be set before a gateway starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from levergate.config import Settings
from levergate.config.environment import unknown_variables
from levergate.errors import ConfigError
from levergate.gateway import Gateway


def test_explicit_values_beat_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {port: 9000, host: 0.0.0.0, max_body_bytes: 4096}\n")
    monkeypatch.setenv("LEVERGATE_SERVER__PORT", "9100")
    monkeypatch.setenv("LEVERGATE_SERVER__HOST", "127.0.0.2")
    settings = Settings.load(path, server={"port": 9200})
    # The flag's port; the environment's host over the file's; the file's body limit.
    assert (settings.server.port, settings.server.host, settings.server.max_body_bytes) == (
        9200, "127.0.0.2", 4096,
    )  # fmt: skip
    assert Settings.load(path).server.port == 9100


def test_an_explicit_value_replaces_an_invalid_environment_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`levergate serve --port 0` while the deployment's environment has a bad port: the flag
    is what the operator meant, and the environment's value is never validated."""
    monkeypatch.setenv("LEVERGATE_SERVER__PORT", "99999")
    assert Settings.load(server={"port": 0}).server.port == 0
    assert Settings.for_upstream("http://127.0.0.1:9/v1", server={"port": 0}).server.port == 0


def test_the_upstream_flag_beats_an_environment_model_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEVERGATE_MODELS", '[{"name": "*", "upstream": "elsewhere"}]')
    settings = Settings.for_upstream("http://127.0.0.1:9/v1")
    assert [(m.name, m.upstream) for m in settings.models] == [("*", "default")]


@pytest.mark.parametrize(
    ("variable", "value", "where"),
    [
        ("LEVERGATE_SERVER__PORT", "99999", "server.port"),
        ("LEVERGATE_SERVER__PROT", "1", "server.prot"),
        ("LEVERGATE_TRAFFIC__RETRY__MAX_ATTEMPTS", "0", "traffic.retry.max_attempts"),
        ("LEVERGATE_UPSTREAMS", '[{"name": "a", "base_url": "ftp://x"}]', "upstreams.0"),
        ("levergate_log_level", "loud", "log_level"),
    ],
)
def test_a_bad_value_from_the_environment_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, where: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        Settings.load()
    line = next(x for x in caught.value.message.splitlines() if x.strip().startswith(where))
    assert line.endswith(f"(from the environment: {variable})")


def test_a_bad_value_from_the_file_does_not_blame_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {port: 99999}\n")
    monkeypatch.setenv("LEVERGATE_SERVER__HOST", "127.0.0.1")
    with pytest.raises(ConfigError) as caught:
        Settings.load(path)
    assert "server.port" in caught.value.message
    assert "environment" not in caught.value.message


def test_a_section_given_as_broken_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEVERGATE_UPSTREAMS", "[{not json")
    with pytest.raises(ConfigError, match="upstreams"):
        Settings.load()


def test_variables_that_name_no_section_are_reported_with_a_suggestion() -> None:
    environ = {
        "LEVERGATE_SERVR__PORT": "9000",
        "LEVERGATE_SERVER__PORT": "9000",
        "LEVERGATE_ZZZ": "1",
        "PATH": "/bin",
    }
    lines = unknown_variables(Settings, environ)
    assert len(lines) == 2
    assert lines[0].startswith("LEVERGATE_SERVR__PORT names no setting")
    assert "did you mean LEVERGATE_SERVER?" in lines[0]
    assert lines[1].startswith("LEVERGATE_ZZZ names no setting")


async def test_a_gateway_logs_each_unknown_variable_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LEVERGATE_CAHCE__ENABLED", "false")
    caplog.set_level(logging.WARNING, logger="levergate.gateway")
    gateway = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1"))
    await gateway.aclose()
    assert "LEVERGATE_CAHCE__ENABLED names no setting" in caplog.text
    assert "did you mean LEVERGATE_CACHE?" in caplog.text


def test_a_gateway_refuses_to_start_without_the_key_variables_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LG_OPS_UNSET_KEY", raising=False)
    monkeypatch.setenv("LG_OPS_EMPTY_KEY", "")
    monkeypatch.setenv("LG_OPS_SET_KEY", "sk-present-0123")
    upstreams = [
        {"name": "a", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "LG_OPS_UNSET_KEY"},
        {"name": "b", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "LG_OPS_SET_KEY",
         "api_keys_env": ["LG_OPS_SET_KEY", "LG_OPS_EMPTY_KEY"]},
    ]  # fmt: skip
    # Loading is fine (`levergate catalog --config` reads prices from such a file)...
    settings = Settings.load(upstreams=upstreams, models=[{"name": "m", "upstream": "a"}])
    assert settings.unset_variables() == [
        "upstreams[0] (a).api_key_env: LG_OPS_UNSET_KEY",
        "upstreams[1] (b).api_keys_env[1]: LG_OPS_EMPTY_KEY",
    ]
    # ...starting is not: every request to `a` would be refused by its provider.
    with pytest.raises(ConfigError) as caught:
        Gateway(settings)
    assert "LG_OPS_UNSET_KEY: not set" in caught.value.message
    assert "LG_OPS_EMPTY_KEY: not set" in caught.value.message
    assert "LG_OPS_SET_KEY" not in caught.value.message
    assert "sk-present" not in caught.value.message


def test_an_api_key_given_in_the_file_needs_no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LG_OPS_UNSET_KEY", raising=False)
    settings = Settings.load(
        upstreams=[{"name": "a", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-in-file-0",
                    "api_key_env": "LG_OPS_UNSET_KEY"}],
    )  # fmt: skip
    assert settings.unset_variables() == []
