"""`levergate serve | sim | bench | batch | catalog | router`: one entry point, one module per
subcommand.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func` to a callable taking the parsed arguments and returning the process exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from levergate.cli import batch, bench, catalog, router, serve, sim
from levergate.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="levergate",
        description="LLM inference-optimization gateway: OpenAI-compatible proxy and library.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (serve, sim, bench, batch, catalog, router):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"levergate: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
