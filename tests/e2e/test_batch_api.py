"""The Batch API through the official OpenAI SDK: a real gateway on loopback in front of the
simulator, files uploaded as multipart, batches run by the runner through the pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

SDK = openai.AsyncOpenAI


def line(
    custom_id: str, *, max_tokens: int = 2, url: str = "/v1/chat/completions", **extra: Any
) -> dict[str, Any]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": custom_id}],
        "max_tokens": max_tokens,
    }
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body, **extra}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(item) + b"\n" for item in lines)


def batch_settings(tmp: Path, **over: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "dir": str(tmp / "files"),
        "poll_seconds": 0.05,
        "store": {"sqlite_path": str(tmp / "batch.sqlite3")},
        **over,
    }


@pytest.fixture
async def gateway(sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path) -> AsyncIterator[str]:
    async with gateway_at(sim.base_url, batch=batch_settings(tmp_path)) as url:
        yield url


def sdk(url: str, tenant: str = "acme") -> SDK:
    return SDK(
        base_url=url, api_key="x", max_retries=0, default_headers={"x-levergate-tenant": tenant}
    )


async def finished(client: SDK, batch_id: str) -> openai.types.Batch:
    for _ in range(600):
        batch = await client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        await asyncio.sleep(0.05)
    raise AssertionError(f"batch {batch_id} never finished: {batch.status}")


async def lines_of(client: SDK, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [orjson.loads(raw) for raw in content.content.splitlines() if raw.strip()]


async def test_a_batch_runs_to_completed_with_output_and_error_files(gateway: str) -> None:
    good = [line(f"req-{i}", max_tokens=1 + i % 4) for i in range(12)]
    bad = [
        {"custom_id": "bad-url", "method": "POST", "url": "/v1/embeddings", "body": {}},
        {
            "custom_id": "bad-method",
            "method": "GET",
            "url": "/v1/chat/completions",
            "body": good[0]["body"],
        },
        {
            "custom_id": "no-model",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": []},
        },
    ]
    async with sdk(gateway) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(good + bad)), purpose="batch")
        assert uploaded.purpose == "batch"
        assert uploaded.filename == "in.jsonl"
        assert (await client.files.retrieve(uploaded.id)).bytes == uploaded.bytes
        batch = await client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"job": "nightly"},
        )
        assert batch.status == "validating"
        assert batch.metadata == {"job": "nightly"}
        done = await finished(client, batch.id)
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed) == (15, 12)
        assert done.request_counts.failed == 3
        assert done.in_progress_at
        assert done.finalizing_at
        assert done.completed_at
        output = await lines_of(client, done.output_file_id)
        errors = await lines_of(client, done.error_file_id)
    by_id = {item["custom_id"]: item for item in output}
    assert sorted(by_id) == sorted(g["custom_id"] for g in good)
    for request in good:
        response = by_id[request["custom_id"]]["response"]
        assert response["status_code"] == 200
        assert response["body"]["usage"]["completion_tokens"] == request["body"]["max_tokens"]
    assert {e["custom_id"] for e in errors} == {"bad-url", "bad-method", "no-model"}
    assert all(e["error"]["message"] for e in errors)


@pytest.mark.parametrize(
    ("content", "purpose", "code"),
    [
        (b"not json\n", "batch", "invalid_jsonl"),
        (jsonl([line("a"), line("a")]), "batch", "duplicate_custom_id"),
        (jsonl([{"method": "POST"}]), "batch", "missing_custom_id"),
        (b"\n\n", "batch", "empty_file"),
        (jsonl([line("a")]), "fine-tune", "invalid_purpose"),
    ],
)
async def test_bad_files_are_refused_with_a_400_that_says_why(
    gateway: str, content: bytes, purpose: str, code: str
) -> None:
    async with sdk(gateway) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.files.create(file=("x.jsonl", content), purpose=purpose)  # type: ignore[arg-type]
        assert refused.value.code == code
        assert (await client.files.list()).data == []


async def test_an_oversize_file_is_a_413(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    settings = batch_settings(tmp_path, max_file_bytes=2048)
    async with gateway_at(sim.base_url, batch=settings) as url, sdk(url) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            await client.files.create(file=("x.jsonl", jsonl([line("a")]) * 40), purpose="batch")
        assert refused.value.status_code == 413


async def test_bad_batch_parameters_and_unknown_ids(gateway: str) -> None:
    async with sdk(gateway) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        with pytest.raises(openai.BadRequestError) as refused:
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/nope",  # type: ignore[arg-type]
                completion_window="24h",
            )
        assert refused.value.code == "invalid_endpoint"
        with pytest.raises(openai.BadRequestError):
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata={f"k{i}": "v" for i in range(17)},
            )
        with pytest.raises(openai.NotFoundError):
            await client.batches.create(
                input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
            )
        with pytest.raises(openai.NotFoundError):
            await client.batches.retrieve("batch_nope")
        with pytest.raises(openai.NotFoundError):
            await client.files.content("file-nope")


async def test_tenants_see_only_their_own_files_and_batches(gateway: str) -> None:
    async with sdk(gateway, "acme") as acme, sdk(gateway, "other") as other:
        uploaded = await acme.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        batch = await acme.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for attempt in (
            other.files.retrieve(uploaded.id),
            other.files.content(uploaded.id),
            other.files.delete(uploaded.id),
            other.batches.retrieve(batch.id),
            other.batches.cancel(batch.id),
            other.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ),
        ):
            with pytest.raises(openai.NotFoundError):
                await attempt
        assert (await other.batches.list()).data == []
        assert (await other.files.list()).data == []
        assert (await finished(acme, batch.id)).status == "completed"


async def test_list_pages_newest_first_with_has_more(gateway: str) -> None:
    async with sdk(gateway) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        made = [
            (
                await client.batches.create(
                    input_file_id=uploaded.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                )
            ).id
            for _ in range(5)
        ]
        first = await client.batches.list(limit=2)
        assert [b.id for b in first.data] == made[::-1][:2]
        assert first.has_more
        every = [b.id async for b in client.batches.list(limit=2)]
        assert every == made[::-1]
        deleted = await client.files.delete(uploaded.id)
        assert deleted.deleted


async def test_cancel_closes_the_lines_that_did_not_run(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    # One line at a time, slowly (the simulator's own latency), so most are still queued.
    settings = batch_settings(tmp_path, concurrency=1)
    lines = [line(f"c-{i}", max_tokens=64) for i in range(40)]
    async with gateway_at(sim.base_url, batch=settings) as url, sdk(url) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status == "cancelling"
        done = await finished(client, batch.id)
        assert done.status == "cancelled"
        assert done.cancelled_at
        output = await lines_of(client, done.output_file_id)
        errors = await lines_of(client, done.error_file_id)
    seen = [item["custom_id"] for item in output + errors]
    assert sorted(seen) == sorted(f"c-{i}" for i in range(40))
    assert any(e["error"]["code"] == "batch_cancelled" for e in errors)


async def test_with_auth_on_lines_run_as_the_key_that_made_the_batch(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    auth = {"enabled": True, "store": {"backend": "memory"},
            "keys": [{"key": "sk-acme", "tenant": "acme", "models": ["m"]},
                     {"key": "sk-other", "tenant": "other"}]}  # fmt: skip
    lines = [line("allowed"), {**line("refused"), "body": {**line("x")["body"], "model": "big"}}]
    async with gateway_at(sim.base_url, auth=auth, batch=batch_settings(tmp_path)) as url:
        async with SDK(base_url=url, api_key="sk-nope", max_retries=0) as nobody:
            with pytest.raises(openai.AuthenticationError):
                await nobody.files.list()
        other = SDK(base_url=url, api_key="sk-other", max_retries=0)
        async with SDK(base_url=url, api_key="sk-acme", max_retries=0) as acme, other:
            uploaded = await acme.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
            batch = await acme.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            with pytest.raises(openai.NotFoundError):
                await other.batches.retrieve(batch.id)
            done = await finished(acme, batch.id)
            output = await lines_of(acme, done.output_file_id)
            errors = await lines_of(acme, done.error_file_id)
    assert [item["custom_id"] for item in output] == ["allowed"]
    assert [item["custom_id"] for item in errors] == ["refused"]
    assert errors[0]["response"]["status_code"] == 403
    assert errors[0]["error"]["code"] == "model_not_allowed"
