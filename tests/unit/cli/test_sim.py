"""`levergate sim` flags map onto the simulator settings."""

from __future__ import annotations

import argparse
from pathlib import Path

from levergate.cli import sim


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sim.add_arguments(parser)
    return parser.parse_args(argv)


def test_every_flag_lands_in_its_setting(tmp_path: Path) -> None:
    config = tmp_path / "sim.yaml"
    config.write_text("seed: 1\nlatency: {ttft_ms: 500, jitter: 0.2}\nembedding_dim: 8\n")
    args = parse(
        "--port", "0", "--host", "127.0.0.2", "--seed", "5", "--ttft-ms", "50",
        "--prefill-ms-per-token", "0.1", "--tokens-per-second", "80", "--rpm", "10",
        "--tpm", "1000", "--max-concurrency", "4", "--error-rate", "0.1", "--hang-rate", "0.1",
        "--disconnect-rate", "0.1", "--malformed-rate", "0.1", "--slow-rate", "0.1",
        "--disconnect-after-chunks", "3", "--max-tokens-default", "32",
        "--no-prompt-cache", "--spaced-json", "--config", str(config),
    )  # fmt: skip
    settings = sim.settings_from_args(args)
    assert (settings.host, settings.port, settings.seed) == ("127.0.0.2", 0, 5)
    assert settings.latency.model_dump() == {
        "ttft_ms": 50, "prefill_ms_per_token": 0.1, "tokens_per_second": 80, "jitter": 0.2,
        "per_request": False,
    }  # fmt: skip
    assert (settings.limits.rpm, settings.limits.tpm, settings.limits.max_concurrency) == (
        10,
        1000,
        4,
    )
    faults = settings.faults
    assert (faults.error_rate, faults.hang_rate, faults.disconnect_rate) == (0.1, 0.1, 0.1)
    assert (faults.malformed_rate, faults.slow_rate, faults.disconnect_after_chunks) == (
        0.1,
        0.1,
        3,
    )
    assert (settings.max_tokens_default, settings.embedding_dim) == (32, 8)
    assert settings.prompt_cache.enabled is False
    assert settings.spaced_json is True


def test_defaults_are_the_fast_path() -> None:
    settings = sim.settings_from_args(parse())
    assert settings.port == 8089
    assert settings.latency.is_zero
    assert not settings.limits.any_rate
    assert settings.faults.total_rate == 0


def test_register_adds_the_sim_subcommand() -> None:
    parser = argparse.ArgumentParser()
    sim.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sim", "--rpm", "3"])
    assert args.func is sim.run
    assert args.rpm == 3


def test_bad_settings_exit_with_code_2(capsys: object) -> None:
    assert sim.main(["--error-rate", "3"]) == 2
