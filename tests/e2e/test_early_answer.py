"""An answer given before the request's body has arrived (a guarded route refusing a wrong key
on an upload) reaches the client: the gateway half-closes and drops the rest of the body for a
while instead of closing with it unread, which reset the connection and destroyed the 401
(found by the multipart fuzz of issue 20). Real gateway, raw socket: the body is still being
sent when the answer is decided."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.raw_http import MARGIN, connect, read_error
from tests.e2e.test_batch_api import batch_settings

KEY = "sk-the-right-key-0123"


@pytest.mark.parametrize("path", ["/v1/files", "/v1/batches", "/v1/async/chat/completions"])
async def test_a_refusal_before_the_body_is_read_reaches_the_client(
    path: str, sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    auth = {"enabled": True, "keys": [{"key": KEY, "tenant": "acme"}]}
    async with gateway_at(sim.base_url, auth=auth, batch=batch_settings(tmp_path),
                          async_requests={"enabled": True}) as url:  # fmt: skip
        reader, writer = await connect(url)
        body = b"x" * 2_000_000
        writer.write(b"POST %s HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\n"
                     b"content-type: application/json\r\nconnection: close\r\n"
                     b"content-length: %d\r\n\r\n" % (path.encode(), len(body)))  # fmt: skip
        await writer.drain()
        await asyncio.sleep(0.05)  # the guard answers on the head; the body is still to come
        with contextlib.suppress(ConnectionError):
            for at in range(0, len(body), 64 * 1024):
                writer.write(body[at : at + 64 * 1024])
                await writer.drain()
        status, error = await read_error(reader, within=MARGIN)
        writer.close()
    assert status == 401
    assert error["code"] == "invalid_api_key"
