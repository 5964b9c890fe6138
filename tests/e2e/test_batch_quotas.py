"""Per-tenant storage quotas, file expiry and upload orphans, end to end: a real gateway on
loopback, the official OpenAI SDK (or a raw socket, for a body that stalls) as the client.

Before: one key uploaded 2.16 GB in 20 s and 3,000 uploads and 3,000 async requests were all
accepted; files never expired (`expires_at` null); an upload that stalled mid-body left a
`*.part` file no API could see or delete, surviving restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from levergate.simulator import SimHandle
from levergate.testing.batch_crash import Gateway, write_config
from levergate.testing.ports import free_port
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import batch_settings, jsonl, line, sdk

DAY = 24 * 3600


@pytest.fixture
async def hung_upstream() -> AsyncIterator[str]:
    """An upstream that takes requests and never answers: work sent to it stays in flight."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


def quotas(**values: int) -> dict[str, int]:
    return {"stored_bytes": 1 << 30, "files": 100, "queued_batches": 100,
            "pending_async_requests": 100, **values}  # fmt: skip


async def test_uploads_past_a_quota_are_refused_naming_it(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    batch = batch_settings(tmp_path, quotas=quotas(files=2, stored_bytes=64 * 1024))
    small = jsonl([line("a")])
    async with gateway_at(sim.base_url, batch=batch) as url, sdk(url) as acme:
        for _ in range(2):
            await acme.files.create(file=("s.jsonl", small), purpose="batch")
        with pytest.raises(openai.RateLimitError) as files:
            await acme.files.create(file=("s.jsonl", small), purpose="batch")
        assert files.value.code == "files_quota_exceeded"
        assert "batch.quotas.files" in files.value.message
        assert files.value.response.headers["x-should-retry"] == "false"
        async with sdk(url, tenant="globex") as globex:  # a quota is each tenant's own
            big = jsonl([line(f"r{i}") for i in range(600)])  # ~90 KB, over 64 KiB
            with pytest.raises(openai.APIStatusError) as over:
                await globex.files.create(file=("big.jsonl", big), purpose="batch")
            assert over.value.status_code == 413
            assert over.value.code == "storage_quota_exceeded"
            assert "batch.quotas.stored_bytes" in over.value.message
            await globex.files.create(file=("s.jsonl", small), purpose="batch")
        await acme.files.delete((await acme.files.list()).data[0].id)  # room again
        await acme.files.create(file=("s.jsonl", small), purpose="batch")
    assert list((tmp_path / "files" / "tmp").iterdir()) == []


async def test_queued_batches_and_pending_async_requests_are_bounded(
    hung_upstream: str, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    batch = batch_settings(tmp_path, quotas=quotas(queued_batches=1, pending_async_requests=1))
    async with (
        gateway_at(hung_upstream, batch=batch, async_requests={"enabled": True}) as url,
        sdk(url) as acme,
    ):
        upload = await acme.files.create(file=("in.jsonl", jsonl([line("a")])), purpose="batch")
        await acme.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )  # in flight: the upstream hangs
        with pytest.raises(openai.RateLimitError) as queued:
            await acme.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")  # fmt: skip
        assert queued.value.code == "queued_batches_quota_exceeded"
        body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        async with httpx.AsyncClient(base_url=url, headers={"x-levergate-tenant": "acme"}) as http:
            assert (await http.post("/async/chat/completions", json=body)).status_code == 202
            refused = await http.post("/async/chat/completions", json=body)
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "pending_async_requests_quota_exceeded"
            other = {"x-levergate-tenant": "globex"}
            taken = await http.post("/async/chat/completions", json=body, headers=other)
            assert taken.status_code == 202


async def test_files_expire_as_openai_files_do(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    async with gateway_at(sim.base_url, batch=batch_settings(tmp_path)) as url, sdk(url) as acme:
        made = await acme.files.create(file=("a.jsonl", jsonl([line("a")])), purpose="batch")
        assert made.expires_at == made.created_at + 30 * DAY  # the default, as OpenAI's
        hours = {"anchor": "created_at", "seconds": 7200}
        asked = await acme.files.create(file=("b.jsonl", jsonl([line("b")])), purpose="batch",
                                        expires_after=hours)  # type: ignore[arg-type]  # fmt: skip
        assert asked.expires_at == asked.created_at + 7200
        assert (await acme.files.retrieve(asked.id)).expires_at == asked.expires_at
        for wrong in ({"anchor": "created_at", "seconds": 60},
                      {"anchor": "last_active_at", "seconds": 7200}):  # fmt: skip
            with pytest.raises(openai.BadRequestError) as refused:
                await acme.files.create(file=("c.jsonl", jsonl([line("c")])), purpose="batch",
                                        expires_after=wrong)  # type: ignore[arg-type]  # fmt: skip
            assert refused.value.param == "expires_after"
    assert list((tmp_path / "files" / "tmp").iterdir()) == []


def _multipart_head(url: str, *, length: int) -> tuple[str, int, bytes]:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    head = (f"POST /v1/files HTTP/1.1\r\nhost: {host}\r\nx-levergate-tenant: acme\r\n"
            f"content-type: multipart/form-data; boundary=XyZ\r\ncontent-length: {length}\r\n"
            '\r\n--XyZ\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            '--XyZ\r\ncontent-disposition: form-data; name="file"; filename="a.jsonl"\r\n'
            "\r\n")  # fmt: skip
    return host, int(port), head.encode()


async def test_an_upload_that_stalls_or_is_cut_leaves_no_temporary_file(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    server = {"body_timeout_seconds": 0.5}
    part = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions"}\n' * 20000
    tmp = tmp_path / "files" / "tmp"
    async with gateway_at(sim.base_url, batch=batch_settings(tmp_path), server=server) as url:
        host, port, head = _multipart_head(url, length=10 * len(part))
        # Stalled: the body stops halfway and the connection stays open.
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + part)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), timeout=30)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        writer.close()
        # Cut: the client goes away mid-body.
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + part + part)
        await writer.drain()
        for _ in range(100):  # until the gateway has begun the upload
            if any(tmp.glob("*.part")):
                break
            await asyncio.sleep(0.02)
        writer.transport.abort()
        for _ in range(500):
            if not any(tmp.glob("*.part")):
                break
            await asyncio.sleep(0.02)
        assert list(tmp.glob("*.part")) == []


async def test_an_upload_cut_by_a_killed_gateway_is_swept_at_its_next_start(
    sim: SimHandle, tmp_path: Path
) -> None:
    port = free_port()
    config = write_config(tmp_path / "gateway.yaml", sim_url=sim.base_url, port=port,
                          store={"sqlite_path": str(tmp_path / "batch.sqlite3")},
                          files=tmp_path / "files", concurrency=4)  # fmt: skip
    gateway = Gateway(config, port, tmp_path / "gateway.log")
    tmp = tmp_path / "files" / "tmp"
    await gateway.start()
    try:
        part = b'{"custom_id": "a"}\n' * 100_000
        _, _, head = _multipart_head(f"http://127.0.0.1:{port}/v1", length=10 * len(part))
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + part)
        await writer.drain()
        for _ in range(500):
            if any(tmp.glob("*.part")):
                break
            await asyncio.sleep(0.02)
        gateway.kill()  # mid-upload: no code of the gateway's runs to clean up
        writer.close()
        assert len(list(tmp.glob("*.part"))) == 1
        await gateway.start()
        for _ in range(500):
            if not any(tmp.glob("*.part")):
                break
            await asyncio.sleep(0.02)
        assert list(tmp.glob("*.part")) == []
    finally:
        gateway.kill()
