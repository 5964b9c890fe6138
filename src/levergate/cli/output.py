"""The CLI's output conventions, shared by every command.

- stdout carries the result only: human text by default, or with `--json` exactly one JSON
  document (so `levergate ... --json | jq` always parses).
- stderr carries everything else: progress, warnings, errors. Progress is drawn live (`rich`)
  when stderr is a terminal; otherwise a plain line at most every `PLAIN_EVERY_S` seconds, so a
  CI log still shows the run advancing. `--quiet` hides it either way.
- Exit codes (`ExitCode`): 0 success, 1 the command ran but failed (a bench with no successful
  request, a batch that failed), 2 bad usage or configuration (argparse's own code too),
  3 the gateway could not be reached (`levergate batch`), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import Any, TextIO

import orjson

__all__ = [
    "PLAIN_EVERY_S", "ExitCode", "Progress", "add_json_flag", "emit_report", "print_json", "warn",
]  # fmt: skip

PLAIN_EVERY_S = 10.0


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the command ran and its result is a failure
    USAGE = 2  # bad flags or configuration (argparse exits with 2 too)
    UNREACHABLE = 3  # the gateway could not be reached
    INTERRUPTED = 130  # Ctrl-C


def add_json_flag(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help=f"print {what} as one JSON document on stdout (instead of human text)",
    )


def print_json(document: Any, out: TextIO | None = None) -> None:
    """One JSON document, indented, newline-terminated, on stdout."""
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    stream = out or sys.stdout
    stream.write(text.decode() + "\n")
    stream.flush()


def emit_report(
    report: dict[str, Any], args: argparse.Namespace, render: Callable[[dict[str, Any]], str]
) -> None:
    """A report's human rendering on stdout, or with `--json` (`args.as_json`) the report alone
    as JSON; `--json-out FILE` (`args.json_out`) writes the JSON to a file as well."""
    if getattr(args, "json_out", None):
        Path(args.json_out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    if getattr(args, "as_json", False):
        print_json(report)
    else:
        print(render(report))


def warn(message: str) -> None:
    print(f"levergate: {message}", file=sys.stderr, flush=True)


class Progress:
    """Progress on stderr: one live `rich` status line on a terminal, a plain line at most every
    `every` seconds otherwise, nothing with `quiet`. `update(text)` is cheap to call often."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        out: TextIO | None = None,
        every: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = out or sys.stderr
        self._quiet = quiet
        self._every = every
        self._clock = clock
        self._last_plain: float | None = None
        self._live: Any = None
        if not quiet and self._out.isatty():
            try:  # the `cli` extra; without it, plain lines on a terminal too
                from rich.console import Console
                from rich.live import Live
                from rich.text import Text
            except ImportError:
                return
            self._text = Text
            self._live = Live(console=Console(file=self._out), auto_refresh=False, transient=False)
            self._live.start()

    @property
    def live(self) -> bool:
        return self._live is not None

    def update(self, text: str) -> None:
        if self._quiet:
            return
        if self._live is not None:
            self._live.update(self._text(text), refresh=True)
            return
        now = self._clock()
        if self._last_plain is None or now - self._last_plain >= self._every:
            self._last_plain = now
            self._out.write(text + "\n")
            self._out.flush()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
