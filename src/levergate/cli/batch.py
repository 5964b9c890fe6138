"""`levergate batch run | status | cancel`: batches from the command line (the sync edge).

    levergate batch run in.jsonl -o out.jsonl --url http://127.0.0.1:8080/v1   # on a gateway
    levergate batch run in.jsonl -o out.jsonl --config levergate.yaml          # in-process
    levergate batch status batch_123 --url http://127.0.0.1:8080/v1
    levergate batch cancel batch_123 --url http://127.0.0.1:8080/v1

`run` is resumable: the same command again attaches to the batch it started (batch_run.py says
how and why the server-side batch is the unit). Its output is `out.jsonl` (the answered lines,
in input order) and `out.jsonl.errors.jsonl` (the failed ones), then a summary on stdout. The
summary prices the usage at the config's aliases (`--config`, or `--prices` with `--url`), else
over `--url` from the built-in catalog by the model each line names.

Exit codes: 0 every line answered; 1 the batch ended with failed lines, or failed, expired or
was cancelled; 2 bad usage or input (a `--url` that is not an http(s) URL, a missing file,
not JSONL, a request the gateway refused, a bad config); 3 the gateway could not be reached or
failed; 130 interrupted (output.py's `ExitCode`).

Output (output.py's conventions): `run` prints the summary on stdout, or with `--json` the same
as one JSON document (`batch_summary.document`, plus the batch's id, endpoint and file ids);
the batch it started or resumed and its progress go to stderr (`output.Progress`: live on a
terminal, a plain line every `PLAIN_EVERY_S` seconds otherwise, none with `--quiet`).

The API key is `--api-key`, else the OpenAI SDK's own `OPENAI_API_KEY`; a gateway without
auth takes any.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from levergate.cli import batch_run
from levergate.cli.batch_summary import Tally, document, money, render
from levergate.cli.commands import SUMMARY
from levergate.cli.output import PLAIN_EVERY_S, ExitCode, Progress, add_json_flag, print_json

if TYPE_CHECKING:
    import openai
    from openai.types import Batch

    from levergate.catalog import Catalog
    from levergate.layers.measure.record import RequestRecord

OK, FAILED_LINES, BAD_INPUT = ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE
GATEWAY, INTERRUPTED = ExitCode.UNREACHABLE, ExitCode.INTERRUPTED
IN_PROCESS_URL = "http://levergate.in-process/v1"
MIN_POLL, MAX_POLL = 0.05, 60.0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("batch", help=SUMMARY["batch"])
    commands = parser.add_subparsers(dest="batch_command", required=True)
    run = commands.add_parser("run", help="run in.jsonl to -o out.jsonl; run again to resume")
    run.add_argument("input", type=Path, help="OpenAI batch input (JSONL)")
    run.add_argument("-o", "--output", type=Path, required=True, help="where answers go")
    target = run.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", type=gateway_url, help="a levergate gateway's base URL (…/v1)")
    target.add_argument("--config", help="run in-process with this levergate YAML config")
    run.add_argument("--api-key", help="gateway key (default: the SDK's OPENAI_API_KEY)")
    run.add_argument("--prices", help="with --url: a levergate config whose model prices apply "
                     "(default: the built-in catalog, by the model each line names)")  # fmt: skip
    run.add_argument("--poll", type=_poll, default=0.5, help="seconds between status checks")
    run.add_argument("--quiet", action="store_true",
                     help="no progress on stderr (else live on a terminal, a plain line every "
                     f"{PLAIN_EVERY_S:g} s otherwise)")  # fmt: skip
    # The flag's name before --quiet, kept for scripts that pass it.
    run.add_argument("--no-progress", dest="quiet", action="store_true", help=argparse.SUPPRESS)
    add_json_flag(run, "the summary")
    run.set_defaults(func=run_command)
    for name, what in (("status", "show"), ("cancel", "cancel")):
        command = commands.add_parser(name, help=f"{what} a batch on a gateway")
        command.add_argument("id", help="the batch id (batch_...)")
        command.add_argument(
            "--url", type=gateway_url, required=True, help="the gateway's base URL (…/v1)"
        )
        command.add_argument("--api-key", help="gateway key (default: OPENAI_API_KEY)")
        add_json_flag(command, "the batch")
        command.set_defaults(func=status_command if name == "status" else cancel_command)


def _poll(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not MIN_POLL <= seconds <= MAX_POLL:
        raise argparse.ArgumentTypeError(f"must be {MIN_POLL}-{MAX_POLL:g} seconds")
    return seconds


def gateway_url(text: str) -> str:
    """`--url` of every batch subcommand: http(s)://host[:port][/path], or a usage error (exit
    2) here rather than a connection error (exit 3) from the SDK later."""
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # `.port`: not a number, or out of range
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(
            "must be an http(s)://host[:port] URL, e.g. http://127.0.0.1:8080/v1"
        )
    return text


# ---- the sync edge ------------------------------------------------------------------------


def run_command(args: argparse.Namespace) -> int:
    _require_extras()
    try:
        plan = batch_run.plan(args.input, args.output)
    except batch_run.InputError as exc:
        return _fail(str(exc), BAD_INPUT)
    if not args.output.parent.is_dir():
        return _fail(f"output directory not found: {args.output.parent}", BAD_INPUT)
    state = RunState()
    try:
        batch, errors, prices = asyncio.run(_run(args, plan, state))
    except KeyboardInterrupt:
        what = "goes on on the gateway" if args.url else "stopped"
        batch_id = state.batch_id or "(not started)"
        return _fail(f"interrupted: batch {batch_id} {what}; run the same command to resume",
                     INTERRUPTED)  # fmt: skip
    except _Failure as exc:
        return _fail(exc.message, exc.code)
    totals = batch_run.tally(plan)
    totals.lever_savings, totals.records = state.tally.lever_savings, state.tally.records
    facts: dict[str, Any] = {
        "status": batch.status, "output": str(plan.output), "errors": errors,
        "in_process": args.config is not None, "builtin": bool(args.url) and not args.prices,
    }  # fmt: skip
    summary = document(totals, money(totals, prices), **facts)
    if args.as_json:
        print_json({"id": batch.id, "endpoint": batch.endpoint, **summary,
                    "output_file_id": batch.output_file_id,
                    "error_file_id": batch.error_file_id})  # fmt: skip
    else:
        print("\n".join(render(summary)))
    return OK if batch.status == "completed" and totals.failed == 0 else FAILED_LINES


def status_command(args: argparse.Namespace) -> int:
    return _one_batch(args, cancel=False)


def cancel_command(args: argparse.Namespace) -> int:
    return _one_batch(args, cancel=True)


def _one_batch(args: argparse.Namespace, *, cancel: bool) -> int:
    _require_extras()

    async def work() -> Batch:
        async with _remote(args) as client:
            batch: Batch = await _api(
                client.batches.cancel(args.id) if cancel else client.batches.retrieve(args.id),
                url=args.url,
            )
            return batch

    try:
        batch = asyncio.run(work())
    except _Failure as exc:
        return _fail(exc.message, exc.code)
    described = batch_run.describe(batch)
    if args.as_json:
        print_json(dict(described))
        return OK
    for key, value in described.items():
        print(f"{key}: {value}")
    return OK


def _fail(message: str, code: int) -> int:
    print(f"levergate: {message}", file=sys.stderr)
    return code


def _require_extras() -> None:
    try:
        import openai  # noqa: F401
    except ImportError as exc:
        from levergate.errors import ConfigError

        raise ConfigError(
            f"`levergate batch` needs the `cli` extra ({exc.name} is missing): "
            "pip install 'levergate[cli]'"
        ) from None


# ---- the async work -----------------------------------------------------------------------


@dataclass(slots=True)
class RunState:
    """What the CLI learns while it runs, kept for its messages and the in-process records."""

    batch_id: str | None = None
    tally: Tally = field(default_factory=Tally)

    def emit(self, record: RequestRecord) -> None:
        """A `Sink` of the in-process gateway: the levers' savings on this batch's lines."""
        if self.batch_id and record.request_id.startswith(f"{self.batch_id}-"):
            self.tally.add_record(record.savings)


class _Failure(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


async def _run(
    args: argparse.Namespace, plan: batch_run.Plan, state: RunState
) -> tuple[Batch, str | None, Catalog]:
    from levergate.catalog import Catalog

    if args.url:
        # The gateway's aliases are not known from here: without --prices each line is priced
        # by the model it names, in the built-in catalog (what `levergate catalog` prints).
        prices = _prices(args.prices) if args.prices else Catalog.builtin()
        async with _remote(args) as client:
            batch, errors = await _api(_drive(client, plan, args, state), url=args.url)
        return batch, errors, prices
    from levergate.app import build_gateway
    from levergate.config import Settings
    from levergate.pipeline import Deps
    from levergate.server.transport import GatewayTransport

    settings = Settings.load(args.config, batch={"enabled": True})
    async with (
        build_gateway(settings, deps=Deps(sinks=[state])) as gateway,
        _client(args, base_url=IN_PROCESS_URL, transport=GatewayTransport(gateway)) as client,
    ):
        batch, errors = await _api(_drive(client, plan, args, state), url="the in-process gateway")
    return batch, errors, Catalog.build(settings)


async def _drive(
    client: openai.AsyncOpenAI, plan: batch_run.Plan, args: argparse.Namespace, state: RunState
) -> tuple[Batch, str | None]:
    found = await batch_run.find(client, plan.tag)
    batch = found or await batch_run.start(client, plan)
    state.batch_id = batch.id
    print(f"{'resuming' if found else 'started'} batch {batch.id} ({plan.endpoint})",
          file=sys.stderr, flush=True)  # fmt: skip
    line = ProgressLine(Progress(quiet=args.quiet))
    try:
        batch = await batch_run.watch(client, batch, poll=args.poll, progress=line.show)
    finally:
        line.close()
    try:
        errors = await batch_run.fetch_results(client, batch, plan)
    except OSError as exc:
        raise _Failure(f"cannot write {plan.output}: {exc.strerror}", BAD_INPUT) from None
    return batch, errors


def _prices(path: str) -> Catalog:
    from levergate.catalog import Catalog
    from levergate.config import Settings

    return Catalog.build(Settings.load(path))


def _remote(args: argparse.Namespace) -> contextlib.AbstractAsyncContextManager[openai.AsyncOpenAI]:
    return _client(args, base_url=args.url.rstrip("/"), transport=None)


@contextlib.asynccontextmanager
async def _client(
    args: argparse.Namespace, *, base_url: str, transport: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An OpenAI SDK client over the network, or over the in-process gateway's `transport`
    (an httpx transport: the SDK's own HTTP client type differs, but takes an httpx client)."""
    import httpx
    import openai

    async with contextlib.AsyncExitStack() as stack:
        http = None
        if transport is not None:
            http = await stack.enter_async_context(httpx.AsyncClient(transport=transport))
        key = args.api_key or None
        for attempt in (key, "levergate"):  # no key anywhere: a gateway without auth takes any
            try:
                sdk = openai.AsyncOpenAI(
                    base_url=base_url, api_key=attempt, timeout=60.0, max_retries=2,
                    http_client=http,  # type: ignore[arg-type]
                )  # fmt: skip
                break
            except openai.OpenAIError:
                continue
        yield await stack.enter_async_context(sdk)


async def _api(work: Any, *, url: str) -> Any:
    """`work`'s result, the SDK's errors turned into one clear line and an exit code."""
    import openai

    try:
        return await work
    except openai.APIConnectionError as exc:
        raise _Failure(f"cannot reach the gateway at {url}: {exc.message}", GATEWAY) from None
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        code = BAD_INPUT if 400 <= exc.status_code < 500 else GATEWAY
        raise _Failure(
            f"the gateway said {exc.status_code}: {message or exc.message}", code
        ) from None


class ProgressLine:
    """The batch's progress as one line for `output.Progress`: its status, the lines done of
    the total, the failed ones, their rate since this run began watching, and an ETA."""

    __slots__ = ("_clock", "_first", "_out")

    def __init__(self, out: Progress, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._first: tuple[float, int] | None = None  # when and how many done at the first look

    def show(self, batch: Batch) -> None:
        self._out.update(self.text(batch))

    def text(self, batch: Batch) -> str:
        counts = batch.request_counts
        total = counts.total if counts else 0
        failed = counts.failed if counts else 0
        done = counts.completed + failed if counts else 0
        now = self._clock()
        if self._first is None:
            self._first = (now, done)
        since, done_then = self._first
        text = f"batch {batch.status}: {done:,}/{total:,} lines"
        if total:
            text += f" ({100 * done // total}%)"
        text += f", {failed:,} failed"
        if now > since:
            rate = (done - done_then) / (now - since)
            text += f", {rate:,.1f} lines/s"
            if rate > 0 and total > done and batch.status not in batch_run.TERMINAL:
                text += f", ETA {_duration((total - done) / rate)}"
        return text

    def close(self) -> None:
        self._out.close()


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
