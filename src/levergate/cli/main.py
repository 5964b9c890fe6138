"""`levergate serve | sim | bench | batch | catalog | router | labels | cache | config | local |
log | report | analyze`: one entry point, one module per subcommand (`levergate --version`
prints the package's version).

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func` to a callable taking the parsed arguments and returning the process exit code. `main`
imports only the invoked subcommand's module: the others are listed by name and summary
(levergate/cli/commands.py), so `levergate --help` or `levergate batch status` does not pay for
the gateway, pydantic or the HTTP stacks.
Output conventions and exit codes (levergate/cli/output.py): the result on stdout (human text, or
one JSON document with `--json`), progress and errors on stderr; 0 success, 1 the command ran
and failed, 2 bad usage or configuration, 3 the gateway unreachable, 130 interrupted; a reader
of stdout that left early (`levergate log export | head`) ends the command quietly with 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from levergate.cli.commands import SUMMARY
from levergate.cli.output import ExitCode
from levergate.errors import ConfigError
from levergate.version import __version__


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand registered by its module; given the command line, only
    the invoked subcommand's (the others are placeholders with their summary: the same
    `levergate --help`, and any of them on the command line is the one registered)."""
    parser = argparse.ArgumentParser(
        prog="levergate",
        description="LLM inference-optimization gateway: OpenAI-compatible proxy and library.",
    )
    parser.add_argument("--version", action="version", version=f"levergate {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    invoked = None if argv is None else _invoked(argv)
    for name, summary in SUMMARY.items():
        if argv is None or name == invoked:
            importlib.import_module(f"levergate.cli.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _invoked(argv: Sequence[str]) -> str | None:
    """The subcommand on the command line: its first word that is not an option (the top-level
    options, `--help` and `--version`, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"levergate: {exc.message}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        _stdout_gone()
        return ExitCode.FAILED
    return code


def _stdout_gone() -> None:
    """stdout's reader closed the pipe (`| head`): the rest of the output has nowhere to go, so
    stdout becomes /dev/null (the interpreter's last flush at exit would raise again) and the
    command ends without a traceback, as Python's signal documentation advises for SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
