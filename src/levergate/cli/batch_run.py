"""The work behind `levergate batch run`: one durable batch on a levergate Batch API, watched.

Why a server-side batch and not the lines one by one from the CLI: the batch job is already the
durable, resumable unit (batch/runner.py: lines under a lease, one result per line, a SIGKILL
loses none). A CLI that sent lines itself would need a second ledger of what was sent and
answered, and would lose its in-flight lines' answers when killed. So the CLI only uploads,
creates, watches and downloads; the same code path serves both targets:

- `--url`: the OpenAI SDK against a levergate gateway; killing the CLI does not stop the batch,
  and running the command again attaches to it;
- `--config`: the same SDK calls into an in-process `Gateway` (its `GatewayTransport`) with
  `batch.enabled` forced on and the config's durable job store — the CLI process is the
  runner, so killing it stops the work, and running again resumes it from the store (lines
  in flight at the kill come back when their lease lapses, `batch.lease_seconds`).

A run is found again by a tag in the batch's `metadata`: the SHA-256 of the input file's bytes
and of the output path. Completed lines are never run again: a rerun attaches to the job that
holds them. The output is written once the batch has ended, to a temporary file renamed into
place, so a killed run never leaves half an output file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from levergate.cli.batch_summary import Tally
from levergate.core.json_bound import parse_json

if TYPE_CHECKING:
    import openai
    from openai.types import Batch

TAG_KEY = "levergate_run"
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
# How many of the tenant's batches a rerun looks through for its tag (newest first).
MAX_SCAN = 10_000
HASH_CHUNK = 1 << 20


class InputError(Exception):
    """The input file cannot be a batch (missing, unreadable, not JSONL): exit code 2."""


@dataclass(frozen=True, slots=True)
class Plan:
    input: Path
    output: Path
    errors: Path
    endpoint: str
    tag: str


def plan(input_path: Path, output: Path) -> Plan:
    """Check the input locally (the gateway checks every line again) and name the run."""
    if not input_path.is_file():
        raise InputError(f"input file not found: {input_path}")
    if output.resolve() == input_path.resolve():
        raise InputError(f"the output would overwrite the input: {output}")
    endpoint = _first_endpoint(input_path)
    digest = _sha256(input_path)
    where = hashlib.sha256(str(output.resolve()).encode()).hexdigest()[:16]
    errors = output.with_name(f"{output.name}.errors.jsonl")
    return Plan(input_path, output, errors, endpoint, f"{digest}:{where}")


def _first_endpoint(path: Path) -> str:
    try:
        with path.open("rb") as source:
            for number, raw in enumerate(source, start=1):
                if raw.strip():
                    return _endpoint_of(raw, number=number, path=path)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    raise InputError(f"{path} is empty: a batch needs at least one JSONL request line")


def _endpoint_of(raw: bytes, *, number: int, path: Path) -> str:
    try:
        line = parse_json(raw)
    except orjson.JSONDecodeError:
        raise InputError(
            f"{path} is not JSONL: line {number} is not a JSON object "
            '(expected {"custom_id": ..., "method": "POST", "url": ..., "body": {...}})'
        ) from None
    url = line.get("url") if isinstance(line, dict) else None
    if not isinstance(url, str) or not url:
        raise InputError(f'{path}: line {number} has no "url" (e.g. /v1/chat/completions)')
    return url


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def find(client: openai.AsyncOpenAI, tag: str) -> Batch | None:
    """The newest batch this run made before, if any."""
    seen = 0
    async for batch in client.batches.list(limit=100):
        if (batch.metadata or {}).get(TAG_KEY) == tag:
            return batch
        seen += 1
        if seen >= MAX_SCAN:
            break
    return None


async def start(client: openai.AsyncOpenAI, run: Plan) -> Batch:
    with run.input.open("rb") as source:
        uploaded = await client.files.create(
            file=(run.input.name, source, "application/jsonl"), purpose="batch"
        )
    return await client.batches.create(
        input_file_id=uploaded.id,
        endpoint=run.endpoint,  # type: ignore[arg-type]  # the gateway validates it
        completion_window="24h",
        metadata={TAG_KEY: run.tag},
    )


Progress = Callable[["Batch"], None]


async def watch(
    client: openai.AsyncOpenAI, batch: Batch, *, poll: float, progress: Progress
) -> Batch:
    """Poll until the batch ends, reporting each state to `progress`."""
    while True:
        progress(batch)
        if batch.status in TERMINAL:
            return batch
        await asyncio.sleep(poll)
        batch = await client.batches.retrieve(batch.id)


async def download(client: openai.AsyncOpenAI, file_id: str, target: Path) -> None:
    """`file_id`'s content streamed to `target` through a temporary file and a rename."""
    temp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        async with client.files.with_streaming_response.content(file_id) as response:
            with temp.open("wb") as sink:
                async for chunk in response.iter_bytes():
                    sink.write(chunk)
                sink.flush()
                os.fsync(sink.fileno())
        temp.replace(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


async def fetch_results(client: openai.AsyncOpenAI, batch: Batch, run: Plan) -> str | None:
    """Write the output (and error) file; the error file's path, or None when there is none."""
    if batch.output_file_id:
        await download(client, batch.output_file_id, run.output)
    else:
        run.output.write_bytes(b"")
    if batch.error_file_id:
        await download(client, batch.error_file_id, run.errors)
        return str(run.errors)
    with contextlib.suppress(FileNotFoundError):
        run.errors.unlink()  # a stale one from another input would mislead
    return None


def tally(run: Plan) -> Tally:
    """Counts and usage from the written files, priced later at the alias each line asked for."""
    asked = dict(_asked_models(run.input))
    result = Tally()
    for path in (run.output, run.errors):
        for line in _lines(path):
            custom_id = parse_json(line).get("custom_id")
            result.add_result(line, model=asked.get(custom_id) if custom_id else None)
    return result


def _asked_models(path: Path) -> Iterator[tuple[str, str]]:
    for line in _lines(path):
        with contextlib.suppress(orjson.JSONDecodeError):
            data = parse_json(line)
            body = data.get("body") if isinstance(data, dict) else None
            model = body.get("model") if isinstance(body, dict) else None
            if isinstance(data.get("custom_id"), str) and isinstance(model, str):
                yield data["custom_id"], model


def _lines(path: Path) -> Iterator[bytes]:
    if not path.exists():
        return
    with path.open("rb") as source:
        yield from (raw for raw in source if raw.strip())


def describe(batch: Batch) -> Mapping[str, Any]:
    counts = batch.request_counts
    return {
        "id": batch.id,
        "status": batch.status,
        "endpoint": batch.endpoint,
        "total": counts.total if counts else 0,
        "completed": counts.completed if counts else 0,
        "failed": counts.failed if counts else 0,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at,
    }
