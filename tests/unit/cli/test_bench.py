"""`levergate bench` flags become a validated `BenchConfig`; bad flags are one-line errors."""

from __future__ import annotations

import argparse

import pytest

from levergate.cli import bench
from levergate.cli.main import build_parser, main
from levergate.errors import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_flags_map_onto_the_config() -> None:
    args = parse(
        "http://127.0.0.1:8080/v1",
        "--rate", "250", "--arrival", "poisson", "--duration", "5", "--stream",
        "--model", "m", "--endpoint", "completions", "--prompt-tokens", "300",
        "--max-tokens", "20", "--api-key", "sk-x", "--header", "X-A: 1", "--header", "X-B:2",
        "--extra-body", '{"temperature": 0}', "--repeat-rate", "0.25", "--seed", "7",
        "--max-outstanding", "99", "--timeout", "5", "--quiet",
    )  # fmt: skip
    assert args.func is bench.run
    config = bench.config_from_args(args)
    assert config.mode == "rate"
    assert (config.rate, config.arrival, config.duration_s) == (250.0, "poisson", 5.0)
    assert config.target_url() == "http://127.0.0.1:8080/v1/completions"
    assert config.headers == (("X-A", "1"), ("X-B", "2"))
    assert config.extra_body == {"temperature": 0}
    assert config.api_key is not None
    assert config.api_key.get_secret_value() == "sk-x"
    assert "sk-x" not in repr(config)
    assert (config.prompt_tokens, config.max_tokens, config.max_outstanding) == (300, 20, 99)


def test_trace_mode_and_defaults() -> None:
    config = bench.config_from_args(parse("http://h:1", "--trace", "azure", "--time-scale", "0.1"))
    assert config.mode == "trace"
    assert config.time_scale == 0.1
    assert config.stop_after_s is None  # a trace ends by itself
    closed = bench.config_from_args(parse("http://h:1"))
    assert (closed.mode, closed.workers, closed.stop_after_s) == ("closed", 1, 10.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--header", "no-colon"],
        ["--extra-body", "[1]"],
        ["--extra-body", "{nope"],
        ["--repeat-rate", "2"],
    ],
)
def test_bad_values_are_config_errors(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        bench.config_from_args(parse("http://h:1", *argv))


def test_rate_and_concurrency_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("http://h:1", "--rate", "1", "--concurrency", "2")
    assert "not allowed with" in capsys.readouterr().err


def test_a_missing_trace_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "http://127.0.0.1:9", "--trace", "/nonexistent/trace.csv"]) == 2
    assert "neither a file" in capsys.readouterr().err
