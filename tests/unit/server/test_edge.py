"""The edge with routes of the tests' own, through both adapters (the ASGI app, driven with ASGI
messages, and the in-process httpx transport): a streaming route gets its body in chunks it
writes to disk, never whole, with the limit enforced mid-stream; a file response leaves disk in
chunks with its content-length up front; every error carries a safe `x-request-id`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.edge import Edge
from levergate.server.exchange import Request, Response, file_response
from levergate.server.route import Route
from levergate.server.transport import GatewayTransport

KIB = 1024
CHUNK = 64 * KIB
LIMIT = 256 * KIB


class Uploads:
    """A streaming handler that writes each chunk to disk as it arrives and keeps the file only
    once the whole body is in; it records the size of every chunk it held in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sizes: list[int] = []
        self.calls = 0

    async def __call__(self, _edge: Edge, request: Request) -> Response:
        self.calls += 1
        assert request.chunks is not None
        assert request.body == b""
        partial = self.root / f"{request.params['name']}.part"
        with partial.open("wb") as out:
            try:
                async for chunk in request.chunks:
                    self.sizes.append(len(chunk))
                    out.write(chunk)
            except BaseException:
                partial.unlink()
                raise
        partial.rename(self.root / request.params["name"])
        body = orjson.dumps({"bytes": sum(self.sizes)})
        return Response(201, [("content-type", "application/json")], body)


def routes(root: Path, uploads: Uploads) -> tuple[Route, ...]:
    async def download(_edge: Edge, request: Request) -> Response:
        path = root / request.params["name"]
        return file_response(path, content_type="application/octet-stream", chunk_bytes=CHUNK)

    return (
        Route("POST", "/v1/files/{name}", uploads, stream=True, max_body_bytes=LIMIT),
        Route("GET", "/v1/files/{name}", download),
    )


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async with Gateway(Settings.for_upstream("http://127.0.0.1:9/v1")) as gw:
        yield gw


@pytest.fixture
def uploads(tmp_path: Path) -> Uploads:
    return Uploads(tmp_path)


@pytest.fixture
def app(gateway: Gateway, tmp_path: Path, uploads: Uploads) -> App:
    return App(gateway, routes=routes(tmp_path, uploads))


@pytest.fixture
async def http(
    gateway: Gateway, tmp_path: Path, uploads: Uploads
) -> AsyncIterator[httpx.AsyncClient]:
    transport = GatewayTransport(gateway, routes=routes(tmp_path, uploads))
    async with httpx.AsyncClient(transport=transport, base_url="http://levergate") as client:
        yield client


class Asgi:
    """One ASGI exchange: the request body as messages, the app's sends recorded."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.messages = [
            {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
            for i, c in enumerate(chunks)
        ]
        self.delivered = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.delivered < len(self.messages):
            self.delivered += 1
            return self.messages[self.delivered - 1]
        await asyncio.Event().wait()  # a connected client that has sent everything
        raise AssertionError("unreachable")

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    @property
    def bodies(self) -> list[bytes]:
        return [m.get("body", b"") for m in self.sent[1:]]


async def exchange(app: App, method: str, path: str, chunks: list[bytes], **headers: str) -> Asgi:
    asgi = Asgi(chunks)
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }
    await app(scope, asgi.receive, asgi.send)
    return asgi


def pieces(total: int) -> list[bytes]:
    data = os.urandom(total)
    return [data[i : i + CHUNK] for i in range(0, total, CHUNK)]


async def test_an_upload_reaches_disk_in_chunks_never_whole_over_asgi(
    app: App, tmp_path: Path, uploads: Uploads
) -> None:
    chunks = pieces(LIMIT - 1000)
    asgi = await exchange(app, "POST", "/v1/files/a.jsonl", chunks)
    assert asgi.status == 201
    assert (tmp_path / "a.jsonl").read_bytes() == b"".join(chunks)
    assert uploads.sizes == [len(c) for c in chunks]
    assert max(uploads.sizes) <= CHUNK < LIMIT - 1000


async def test_an_upload_over_the_limit_is_cut_mid_stream_with_a_413_over_asgi(
    app: App, tmp_path: Path, uploads: Uploads
) -> None:
    chunks = pieces(4 * LIMIT)  # no content-length: only counting while streaming can stop it
    asgi = await exchange(app, "POST", "/v1/files/big.jsonl", chunks)
    assert asgi.status == 413
    assert str(LIMIT) in orjson.loads(b"".join(asgi.bodies))["error"]["message"]
    assert asgi.headers["x-request-id"]
    # Stopped as soon as the limit was passed: the handler held at most the limit, and most of
    # the body was never read.
    assert sum(uploads.sizes) <= LIMIT
    assert asgi.delivered == LIMIT // CHUNK + 1
    assert list(tmp_path.iterdir()) == []


async def test_a_declared_length_over_the_limit_is_refused_before_the_handler_runs(
    app: App, uploads: Uploads
) -> None:
    asgi = await exchange(app, "POST", "/v1/files/x", [b"{}"], content_length=str(LIMIT + 1))
    assert asgi.status == 413
    assert uploads.calls == 0
    assert asgi.delivered == 0


async def test_an_upload_over_the_transport_streams_and_stops_at_the_limit(
    http: httpx.AsyncClient, tmp_path: Path, uploads: Uploads
) -> None:
    produced = 0

    async def body(total: int) -> AsyncIterator[bytes]:
        nonlocal produced
        for chunk in pieces(total):
            produced += 1
            yield chunk

    ok = await http.post("/v1/files/ok.bin", content=body(LIMIT))
    assert ok.status_code == 201
    assert ok.json() == {"bytes": LIMIT}
    assert max(uploads.sizes) == CHUNK
    assert (tmp_path / "ok.bin").stat().st_size == LIMIT

    produced = 0
    refused = await http.post("/v1/files/big.bin", content=body(4 * LIMIT))
    assert refused.status_code == 413
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert produced == LIMIT // CHUNK + 1
    assert not (tmp_path / "big.bin").exists()


async def test_a_file_response_leaves_disk_in_chunks_with_its_length_over_asgi(
    app: App, tmp_path: Path
) -> None:
    data = os.urandom(5 * CHUNK + 123)
    (tmp_path / "out.jsonl").write_bytes(data)
    asgi = await exchange(app, "GET", "/v1/files/out.jsonl", [b""])
    assert asgi.status == 200
    assert asgi.headers["content-length"] == str(len(data))
    assert b"".join(asgi.bodies) == data
    assert max(len(b) for b in asgi.bodies) == CHUNK
    head = await exchange(app, "HEAD", "/v1/files/out.jsonl", [b""])
    assert head.status == 200
    assert head.headers["content-length"] == str(len(data))
    assert b"".join(head.bodies) == b""


async def test_a_file_response_over_the_transport(http: httpx.AsyncClient, tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK + 7)
    (tmp_path / "out.bin").write_bytes(data)
    async with http.stream("GET", "/v1/files/out.bin") as response:
        assert response.headers["content-length"] == str(len(data))
        received = [chunk async for chunk in response.aiter_raw()]
    assert b"".join(received) == data
    assert max(len(c) for c in received) <= CHUNK
    head = await http.head("/v1/files/out.bin")
    assert head.headers["content-length"] == str(len(data))
    assert head.content == b""


async def test_an_upload_cut_short_by_the_client_keeps_no_file(
    app: App, tmp_path: Path, uploads: Uploads
) -> None:
    asgi = Asgi([])
    asgi.messages = [
        {"type": "http.request", "body": b"x" * CHUNK, "more_body": True},
        {"type": "http.disconnect"},
    ]
    scope = {"type": "http", "method": "POST", "path": "/v1/files/cut", "headers": []}
    await app(scope, asgi.receive, asgi.send)
    assert asgi.status == 400
    assert orjson.loads(b"".join(asgi.bodies))["error"]["code"] == "incomplete_body"
    assert uploads.sizes == [CHUNK]
    assert list(tmp_path.iterdir()) == []


async def test_unknown_paths_and_wrong_methods_are_openai_errors_with_a_request_id(
    app: App, http: httpx.AsyncClient
) -> None:
    missing = await http.get("/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "unknown_url"
    assert missing.headers["x-request-id"]
    wrong = await http.delete("/v1/files/x")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, HEAD, POST"
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    asgi = await exchange(app, "PUT", "/v1/files/x", [b""], x_request_id="trace-1")
    assert asgi.status == 405
    assert asgi.headers["x-request-id"] == "trace-1"
