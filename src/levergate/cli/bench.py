"""`levergate bench URL`: load-test any OpenAI-compatible endpoint from the command line.

The sync edge of `levergate.bench`: parses flags into a `BenchConfig`, runs one event loop
(uvloop when installed: it cuts the client's CPU per request by about a fifth), draws a one-line
progress display on stderr (live on a terminal, a plain line every few seconds otherwise), and
prints the result on stdout: the markdown table by default, one JSON document with `--json`
(levergate/cli/output.py: the CLI's conventions); `--json-out` and `--markdown` write files.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import SecretStr

from levergate.bench import BenchConfig, BenchResult, Snapshot, run_bench
from levergate.bench.config import (
    DEFAULT_LATE_AFTER_S,
    DEFAULT_MAX_OUTSTANDING,
    DEFAULT_MODEL,
    DEFAULT_TIMEOUT_S,
)
from levergate.bench.traces import TRACE_NAMES
from levergate.cli.commands import SUMMARY
from levergate.cli.output import PLAIN_EVERY_S, ExitCode, Progress, add_json_flag
from levergate.core.json_bound import parse_json
from levergate.errors import ConfigError

_T = TypeVar("_T")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench",
        help=SUMMARY["bench"],
        description=(
            "Closed loop with --concurrency, open loop with --rate or --trace. Open-loop "
            "latencies count from each request's intended send time (no coordinated omission)."
        ),
    )
    parser.add_argument("url", help="base URL (http://host:port[/v1]) or a full endpoint URL")
    _load_flags(parser)
    _request_flags(parser)
    _output_flags(parser)
    parser.set_defaults(func=run)


def _load_flags(parser: argparse.ArgumentParser) -> None:
    load = parser.add_argument_group("load model")
    shape = load.add_mutually_exclusive_group()
    shape.add_argument("--concurrency", type=int, help="closed loop: N workers (default 1)")
    shape.add_argument("--rate", type=float, help="open loop: R requests per second")
    load.add_argument(
        "--arrival",
        choices=("uniform", "poisson"),
        default="uniform",
        help="spacing of --rate arrivals (default uniform, as wrk2)",
    )
    load.add_argument(
        "--trace", help=f"open loop at a trace's times: {', '.join(TRACE_NAMES)} or PATH"
    )
    load.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply trace offsets (0.1 = ten times faster)",
    )
    load.add_argument(
        "--data-dir", type=Path, help="where trace names resolve (default ../shared/data)"
    )
    load.add_argument("--requests", type=int, help="stop after N requests")
    load.add_argument("--duration", type=float, help="stop sending after S seconds (default 10 s)")
    load.add_argument(
        "--max-outstanding",
        type=int,
        default=DEFAULT_MAX_OUTSTANDING,
        help="open loop: cap on requests in flight",
    )
    load.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per request, seconds"
    )
    load.add_argument(
        "--drain-timeout",
        type=float,
        help="after sending stops, wait this long for replies (default --timeout)",
    )
    load.add_argument(
        "--late-after",
        type=float,
        default=DEFAULT_LATE_AFTER_S,
        help="a launch this many seconds behind schedule counts as late",
    )


def _request_flags(parser: argparse.ArgumentParser) -> None:
    request = parser.add_argument_group("request shape")
    request.add_argument(
        "--endpoint", choices=("chat", "completions", "embeddings"), default="chat"
    )
    request.add_argument("--model", default=DEFAULT_MODEL)
    request.add_argument("--stream", action="store_true", help="stream; measures TTFT and ITL")
    request.add_argument("--prompt-tokens", type=int, help="synthetic prompt size (default 128)")
    request.add_argument("--max-tokens", type=int, help="output cap (default 64)")
    request.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    request.add_argument("--header", action="append", default=[], metavar="K:V", help="repeatable")
    request.add_argument("--extra-body", help="JSON object merged into every request body")
    request.add_argument(
        "--repeat-rate",
        type=float,
        default=0.0,
        help="share of requests that repeat an earlier body exactly",
    )
    request.add_argument("--seed", type=int, default=0)


def _output_flags(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output")
    add_json_flag(output, "the result (instead of the markdown table)")  # type: ignore[arg-type]
    output.add_argument("--json-out", type=Path, metavar="PATH", help="also write the JSON here")
    output.add_argument(
        "--markdown", type=Path, metavar="PATH", help="also write the markdown here"
    )
    output.add_argument(
        "--samples", action="store_true",
        help="keep every request's latencies in the JSON (for `levergate report --bench`)",
    )  # fmt: skip
    output.add_argument(
        "--quiet",
        action="store_true",
        help="no progress on stderr (else live on a terminal, a plain line every "
        f"{PLAIN_EVERY_S:g} s otherwise)",
    )


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        url=args.url,
        concurrency=args.concurrency,
        rate=args.rate,
        arrival=args.arrival,
        trace=args.trace,
        time_scale=args.time_scale,
        requests=args.requests,
        duration_s=args.duration,
        max_outstanding=args.max_outstanding,
        stream=args.stream,
        model=args.model,
        endpoint=args.endpoint,
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        api_key=SecretStr(args.api_key) if args.api_key else None,
        headers=tuple(_header(item) for item in args.header),
        extra_body=_extra_body(args.extra_body),
        repeat_rate=args.repeat_rate,
        seed=args.seed,
        timeout_s=args.timeout,
        drain_timeout_s=args.drain_timeout,
        late_after_s=args.late_after,
        data_dir=args.data_dir,
        samples=args.samples,
    ).validate()


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    line = ProgressLine(Progress(quiet=args.quiet))
    try:
        result = _run_loop(run_bench(config, progress=None if args.quiet else line.update))
    finally:
        line.close()
    _emit(result, as_json=args.as_json, json_path=args.json_out, markdown_path=args.markdown)
    return ExitCode.OK if result.ok > 0 else ExitCode.FAILED


def _run_loop(coro: Coroutine[Any, Any, _T]) -> _T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _emit(
    result: BenchResult, *, as_json: bool, json_path: Path | None, markdown_path: Path | None
) -> None:
    """stdout gets exactly one thing: the JSON document with `--json`, else the markdown."""
    if json_path is not None:
        json_path.write_text(result.to_json() + "\n", encoding="utf-8")
    if markdown_path is not None:
        markdown_path.write_text(result.to_markdown(), encoding="utf-8")
    if as_json:
        sys.stdout.write(result.to_json() + "\n")
    else:
        sys.stdout.write(result.to_markdown())
    sys.stdout.flush()


def _header(item: str) -> tuple[str, str]:
    name, sep, value = item.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"bench: --header wants NAME:VALUE, got {item!r}")
    return name.strip(), value.strip()


def _extra_body(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = parse_json(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"bench: --extra-body is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError("bench: --extra-body must be a JSON object")
    return value


class ProgressLine:
    """The run's progress: sent, done, errors, late, current rps, elapsed (`output.Progress`
    draws it on stderr)."""

    __slots__ = ("_last", "_out")

    def __init__(self, out: Progress) -> None:
        self._out = out
        self._last: Snapshot | None = None

    def update(self, snap: Snapshot) -> None:
        previous = self._last
        window = snap.elapsed_s - previous.elapsed_s if previous else snap.elapsed_s
        done_since = snap.done - previous.done if previous else snap.done
        rps = done_since / window if window > 0 else 0.0
        self._last = snap
        self._out.update(
            f"sent {snap.sent:>8,}  done {snap.done:>8,}  errors {snap.errors:>6,}  "
            f"late {snap.late:>6,}  rps {rps:>9,.1f}  elapsed {snap.elapsed_s:>7.1f}s"
        )

    def close(self) -> None:
        self._out.close()
