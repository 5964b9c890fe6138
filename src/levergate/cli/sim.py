"""`levergate sim`: run the simulated OpenAI-compatible provider.

Flags override the `--config` YAML file, which overrides the defaults in
`levergate.simulator.settings`. Everything a flag sets can also be changed on the
running simulator with `POST /sim/config`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from levergate.cli.commands import SUMMARY
from levergate.errors import ConfigError
from levergate.simulator import SimSettings, serve

# flag destination -> path in SimSettings
_FIELDS: dict[str, tuple[str, ...]] = {
    "host": ("host",),
    "port": ("port",),
    "seed": ("seed",),
    "ttft_ms": ("latency", "ttft_ms"),
    "prefill_ms_per_token": ("latency", "prefill_ms_per_token"),
    "tokens_per_second": ("latency", "tokens_per_second"),
    "jitter": ("latency", "jitter"),
    "rpm": ("limits", "rpm"),
    "tpm": ("limits", "tpm"),
    "max_concurrency": ("limits", "max_concurrency"),
    "error_rate": ("faults", "error_rate"),
    "hang_rate": ("faults", "hang_rate"),
    "disconnect_rate": ("faults", "disconnect_rate"),
    "malformed_rate": ("faults", "malformed_rate"),
    "slow_rate": ("faults", "slow_rate"),
    "disconnect_after_chunks": ("faults", "disconnect_after_chunks"),
    "max_tokens_default": ("max_tokens_default",),
    "embedding_dim": ("embedding_dim",),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sim",
        help=SUMMARY["sim"],
        description="A fake, deterministic OpenAI-compatible provider with latency, rate "
        "limits, faults and prompt caching. Answers are generated words, not a model.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--host", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, help="port to listen on; 0 picks a free one (default 8089)")
    add("--seed", type=int, help="seed for generated text, jitter and faults (default 0)")
    add("--config", metavar="FILE", help="YAML file with simulator settings")
    add("--workers", type=int, default=1, help="processes sharing the port via SO_REUSEPORT; "
        "limits, prompt cache and stats are then per worker (default 1)")  # fmt: skip
    latency = parser.add_argument_group("latency (all zero by default: answers are instant)")
    latency.add_argument("--ttft-ms", type=float, help="base time to first token")
    latency.add_argument(
        "--prefill-ms-per-token", type=float, help="extra TTFT per uncached prompt token"
    )
    latency.add_argument("--tokens-per-second", type=float, help="decode speed; 0 = instant")
    latency.add_argument("--jitter", type=float, help="log-normal sigma of latency multipliers")
    limits = parser.add_argument_group("rate limits per API key (off by default)")
    limits.add_argument("--rpm", type=int, help="requests per minute")
    limits.add_argument("--tpm", type=int, help="tokens per minute (prompt + max_tokens)")
    limits.add_argument("--max-concurrency", type=int, help="requests answered at once")
    faults = parser.add_argument_group("fault injection rates, 0..1 (off by default)")
    faults.add_argument("--error-rate", type=float, help="500/503 answers")
    faults.add_argument("--hang-rate", type=float, help="never answer")
    faults.add_argument("--disconnect-rate", type=float, help="close the connection mid-body")
    faults.add_argument("--malformed-rate", type=float, help="200 with a body that is not JSON")
    faults.add_argument("--slow-rate", type=float, help="add the slow delay before the first token")
    faults.add_argument("--disconnect-after-chunks", type=int, help="SSE events before a cut")
    output = parser.add_argument_group("output")
    output.add_argument(
        "--max-tokens-default", type=int, help="output tokens when max_tokens is unset (default 16)"
    )
    output.add_argument("--embedding-dim", type=int, help="embedding dimension (default 1536)")
    output.add_argument(
        "--no-prompt-cache", action="store_true", help="disable prompt-cache emulation"
    )
    output.add_argument(
        "--spaced-json", action="store_true",
        help='write JSON as Python servers do ("key": value), not compact as OpenAI does',
    )  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    overrides: dict[str, Any] = {}
    for dest, path in _FIELDS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        target = overrides
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    if getattr(args, "no_prompt_cache", False):
        overrides.setdefault("prompt_cache", {})["enabled"] = False
    if getattr(args, "spaced_json", False):
        overrides["spaced_json"] = True
    return SimSettings.load(args.config, overrides=overrides)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")

    def announce(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(
            f"levergate sim: SIMULATED OpenAI-compatible provider (fake answers, not a model) "
            f"listening on http://{shown}:{port}/v1 (seed {settings.seed}, "
            f"{args.workers} worker{'s' if args.workers > 1 else ''})",
            flush=True,
        )

    serve(settings, workers=args.workers, announce=announce)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point (`python -m levergate.simulator`)."""
    parser = argparse.ArgumentParser(prog="levergate sim", description="simulated provider")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ConfigError as exc:
        print(f"levergate sim: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
