"""Bad input to `levergate batch`: one clear line on stderr and an exit code, never a
traceback — a missing file, a file that is not JSONL, one the gateway refuses (repeated
`custom_id`s), a gateway that is not there, a missing output directory, a bad config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from levergate.testing.ports import free_port
from tests.e2e.test_batch_cli import run_cli

pytestmark = pytest.mark.timeout(120)
LINE = (
    '{"custom_id": "%s", "method": "POST", "url": "/v1/chat/completions", '
    '"body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}\n'
)


def config(tmp_path: Path) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{free_port()}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "batch": {"dir": str(tmp_path / "files"),
                  "store": {"sqlite_path": str(tmp_path / "b.sqlite3")}},
    }))  # fmt: skip
    return path


def refused(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("levergate: ")
    for word in words:
        assert word in result.stderr


def test_a_missing_input_file(tmp_path: Path) -> None:
    result = run_cli("run", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o"), "--config",
                     str(config(tmp_path)))  # fmt: skip
    refused(result, 2, "input file not found")


def test_a_file_that_is_not_jsonl(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("custom_id,prompt\n1,hello\n")
    result = run_cli(
        "run", str(source), "-o", str(tmp_path / "o"), "--config", str(config(tmp_path))
    )
    refused(result, 2, "is not JSONL", "line 1")


def test_an_empty_file(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("\n\n")
    result = run_cli(
        "run", str(source), "-o", str(tmp_path / "o"), "--config", str(config(tmp_path))
    )
    refused(result, 2, "is empty")


def test_a_file_the_gateway_refuses_repeated_custom_ids(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a" + LINE % "b" + LINE % "a")
    result = run_cli(
        "run", str(source), "-o", str(tmp_path / "o"), "--config", str(config(tmp_path))
    )
    refused(result, 2, "400", "custom_id")
    assert not (tmp_path / "o").exists()


def test_an_unreachable_gateway(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a")
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = run_cli("run", str(source), "-o", str(tmp_path / "o"), "--url", url)
    refused(result, 3, "cannot reach the gateway", url)
    refused(run_cli("status", "batch_x", "--url", url), 3, "cannot reach the gateway")
    refused(run_cli("cancel", "batch_x", "--url", url), 3, "cannot reach the gateway")


def test_a_malformed_url_is_bad_usage_not_an_unreachable_gateway(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a")
    for argv in (("run", str(source), "-o", str(tmp_path / "o")), ("status", "b"), ("cancel", "b")):
        result = run_cli(*argv, "--url", "notaurl")
        assert result.returncode == 2, (argv, result.stderr)
        assert "argument --url: must be an http(s)://host[:port] URL" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_missing_output_directory(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a")
    result = run_cli("run", str(source), "-o", str(tmp_path / "no" / "o"), "--config",
                     str(config(tmp_path)))  # fmt: skip
    refused(result, 2, "output directory not found")


def test_a_bad_config(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a")
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch: {concurrency: -3}\n")
    result = run_cli("run", str(source), "-o", str(tmp_path / "o"), "--config", str(bad))
    refused(result, 2, "invalid configuration", "concurrency")


@pytest.mark.parametrize("poll", ["0", "-1", "nan", "1e9", "x"])
def test_a_poll_interval_out_of_bounds(tmp_path: Path, poll: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(LINE % "a")
    result = run_cli("run", str(source), "-o", str(tmp_path / "o"), "--config",
                     str(config(tmp_path)), "--poll", poll)  # fmt: skip
    assert result.returncode == 2
    assert "--poll: must be 0.05-60 seconds" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_target_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("run", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "one of the arguments --url --config is required" in result.stderr
