"""The operator's commands as real processes: `levergate --version`, `levergate config check |
schema | reference`, and `levergate serve` meeting a missing key variable, a flag against the
environment, and a misspelt `LEVERGATE_*` variable."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import jsonschema
import orjson
import pytest
import yaml

from levergate.testing.ports import free_port
from levergate.version import __version__
from tests.e2e.test_cli import LEVERGATE, wait_for

FILE_KEY = "sk-file-secret-0123456789"
ENV_KEY = "sk-env-secret-0123456789"
CONFIG = f"""
upstreams:
  - {{name: a, base_url: "http://user:url-password-123@127.0.0.1:9/v1", api_key: {FILE_KEY}}}
  - {{name: b, base_url: "http://127.0.0.1:9/v1", api_key_env: LG_OPS_E2E_KEY}}
models:
  - {{name: fast, upstream: a, price: {{input: 1, output: 2}}}}
  - {{name: smart, upstream: b}}
"""


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env.pop("LG_OPS_E2E_KEY", None)
    return env | extra


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEVERGATE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args", [["catalog"], ["catalog", "--json"], ["config", "schema"], ["config", "reference"]]
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(
    args: list[str], tmp_path: Path
) -> None:
    """`levergate ... | head -c 10`: stdout's reader is gone before the command writes (the
    pipe's read end closed at once): no BrokenPipeError traceback, exit code 1."""
    proc = subprocess.Popen(
        [*LEVERGATE, *args], env=environment(), cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=120)
    assert stderr.decode() == ""
    assert proc.returncode == 1


def test_version(tmp_path: Path) -> None:
    result = run(["--version"], environment(), tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"levergate {__version__}"


def test_config_check_prints_the_resolved_configuration_with_every_secret_redacted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text(CONFIG)
    env = environment(
        LG_OPS_E2E_KEY=ENV_KEY, LEVERGATE_SERVER__PORT="9123", LEVERGATE_SERVR__HOST="0.0.0.0"
    )
    result = run(["config", "check", str(path)], env, tmp_path)
    assert result.returncode == 0, result.stderr
    for secret in (FILE_KEY, ENV_KEY, "url-password-123"):
        assert secret not in result.stdout
        assert secret not in result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["server"]["port"] == 9123  # the environment over the file's default
    a, b = resolved["upstreams"]
    assert a["api_key"] == b["api_key"] == "**********"
    assert a["base_url"] == "http://[redacted]@127.0.0.1:9/v1"
    assert resolved["models"][0]["price"]["input"] == 1.0
    assert "LEVERGATE_SERVR__HOST names no setting" in result.stderr
    assert "did you mean LEVERGATE_SERVER?" in result.stderr
    assert "is valid" in result.stderr
    as_json = run(["config", "check", str(path), "--json"], env, tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert orjson.loads(as_json.stdout) == resolved  # one JSON document, the same settings
    assert ENV_KEY not in as_json.stdout


def test_config_check_names_what_replaces_a_per_section_url_and_hides_every_password(
    tmp_path: Path,
) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text("traffic: {store: redis, redis_url: 'redis://:old-password-1@127.0.0.1/0'}\n")
    env = environment(LEVERGATE_STORES__DEFAULT__REDIS_URL="redis://:new-password-2@10.0.0.9/0")
    result = run(["config", "check", str(path)], env, tmp_path)
    assert result.returncode == 0, result.stderr
    for secret in ("old-password-1", "new-password-2"):
        assert secret not in result.stdout + result.stderr
    assert yaml.safe_load(result.stdout)["stores"]["default"]["redis_url"] == "**********"
    assert "traffic.redis_url is deprecated" in result.stderr
    assert "stores.default.redis_url" in result.stderr


def test_config_check_fails_naming_the_field_the_variable_or_the_missing_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text(CONFIG)
    missing = run(["config", "check", str(path)], environment(), tmp_path)
    assert missing.returncode == 2
    assert "upstreams[1] (b).api_key_env: LG_OPS_E2E_KEY: not set" in missing.stderr
    env = environment(LG_OPS_E2E_KEY=ENV_KEY, LEVERGATE_SERVER__PORT="-1")
    bad_env = run(["config", "check", str(path)], env, tmp_path)
    assert bad_env.returncode == 2
    assert "server.port" in bad_env.stderr
    assert "(from the environment: LEVERGATE_SERVER__PORT)" in bad_env.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("traffic: {retry: {max_attempts: 0}}\n")
    bad_file = run(["config", "check", str(broken)], environment(), tmp_path)
    assert bad_file.returncode == 2
    assert "traffic.retry.max_attempts" in bad_file.stderr
    assert "environment" not in bad_file.stderr
    for result in (missing, bad_env, bad_file):
        assert result.stdout == ""
        assert "Traceback" not in result.stderr


def test_config_schema_validates_a_file_and_reference_writes_the_committed_document(
    tmp_path: Path,
) -> None:
    result = run(["config", "schema"], environment(), tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    jsonschema.validate(yaml.safe_load(CONFIG), schema)
    out = tmp_path / "configuration.md"
    assert run(["config", "reference", "-o", str(out)], environment(), tmp_path).returncode == 0
    committed = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert out.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8")


def test_serve_refuses_to_start_when_a_key_variable_is_unset(tmp_path: Path) -> None:
    path = tmp_path / "levergate.yaml"
    path.write_text(CONFIG)
    result = run(["serve", "--config", str(path), "--port", "0"], environment(), tmp_path)
    assert result.returncode == 2
    assert "LG_OPS_E2E_KEY: not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_flag_wins_over_the_environment_and_misspelt_variables_are_logged(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = environment(LEVERGATE_SERVER__PORT="99999", LEVERGATE_CAHCE__ENABLED="false")
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*LEVERGATE, "serve", "--upstream", "http://127.0.0.1:9/v1", "--port", str(port)],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        wait_for(port, proc)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "LEVERGATE_CAHCE__ENABLED names no setting" in text
    assert "did you mean LEVERGATE_CACHE?" in text
