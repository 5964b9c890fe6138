"""An upstream's model list that is not the `{"data": [...]}` object it should be (a JSON array,
text, an error) yields no models rather than an exception, for OpenAI-compatible and
Anthropic upstreams alike: a raw loopback server answers every request with a fixed body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from pydantic import SecretStr

from levergate.config import AnthropicUpstreamSettings, UpstreamSettings
from levergate.upstreams import make_endpoint


@asynccontextmanager
async def answering(body: bytes, status: int = 200) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n" % status
                     + b"content-length: %d\r\n\r\n" % len(body) + body)  # fmt: skip
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"[1, 2]", 200), (b"not json", 200), (b'{"data": "x"}', 200), (b'{"error": {}}', 500)],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_malformed_model_list_is_no_models(body: bytes, status: int, kind: str) -> None:
    async with answering(body, status) as port:
        url = f"http://127.0.0.1:{port}"
        settings: UpstreamSettings = (
            UpstreamSettings(name="u", base_url=url + "/v1")
            if kind == "openai"
            else AnthropicUpstreamSettings(name="u", base_url=url, api_key=SecretStr("k"))
        )
        endpoint = make_endpoint(settings)
        try:
            assert await endpoint.models() == []
        finally:
            await endpoint.aclose()


async def test_a_well_formed_list_keeps_its_objects() -> None:
    async with answering(b'{"data": [{"id": "m1"}, 7, {"id": "m2"}]}') as port:
        endpoint = make_endpoint(UpstreamSettings(name="u", base_url=f"http://127.0.0.1:{port}/v1"))
        try:
            assert [m["id"] for m in await endpoint.models()] == ["m1", "m2"]
        finally:
            await endpoint.aclose()
