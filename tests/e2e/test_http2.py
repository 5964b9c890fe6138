"""A TLS upstream that offers HTTP/2 gets HTTP/2 (ALPN), and a cleartext one HTTP/1.1 keep-alive.
The upstream here is hypercorn over TLS with a throwaway CA from trustme."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme
from hypercorn.asyncio import serve
from hypercorn.config import Config

from levergate import Gateway, Settings

ANSWER = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                       "finish_reason": "stop"}]}  # fmt: skip


class Upstream:
    """A minimal ASGI provider that records the HTTP version each request came in on."""

    def __init__(self) -> None:
        self.versions: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.versions.append(scope["http_version"])
        while (await receive()).get("more_body"):
            pass
        body = orjson.dumps({**ANSWER, "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def tls_upstream(tmp_path: Path) -> AsyncIterator[tuple[str, str, Upstream]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.certfile, config.keyfile = str(cert_file), str(key_file)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = config.errorlog = None
    app = Upstream()
    stop = asyncio.Event()
    task = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        await asyncio.sleep(0.02)
    yield f"https://127.0.0.1:{port}/v1", str(ca_file), app
    stop.set()
    await task


async def test_tls_upstreams_are_spoken_to_over_http2(
    tls_upstream: tuple[str, str, Upstream],
) -> None:
    url, ca_file, app = tls_upstream
    settings = Settings.load(
        upstreams=[{"name": "tls", "base_url": url, "ca_bundle": ca_file}],
        models=[{"name": "*", "upstream": "tls"}],
    )
    async with Gateway(settings) as gateway:
        for _ in range(3):
            reply = await gateway.chat(model="m", messages=[{"role": "user", "content": "x"}])
            assert isinstance(reply, dict)
            assert reply["choices"][0]["message"]["content"] == "hi"
    assert app.versions == ["2", "2", "2"]


async def test_http2_off_falls_back_to_http1(tls_upstream: tuple[str, str, Upstream]) -> None:
    url, ca_file, app = tls_upstream
    settings = Settings.load(
        upstreams=[{"name": "tls", "base_url": url, "ca_bundle": ca_file, "http2": "off"}],
        models=[{"name": "*", "upstream": "tls"}],
    )
    async with Gateway(settings) as gateway:
        await gateway.chat(model="m", messages=[{"role": "user", "content": "x"}])
    assert app.versions == ["1.1"]
