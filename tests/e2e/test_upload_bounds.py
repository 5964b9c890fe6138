"""Uploads at their bounds (issue 20, item 10): a multipart body cut before its closing
boundary was stored, truncated, as if whole; a file of exactly the size limit was refused,
because the multipart framing around it counted against the file's limit.

A real gateway on loopback; the multipart bodies are written by hand so they can be cut."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import batch_settings, line

LIMIT = 64 * 1024
BOUNDARY = "lg-test-boundary-7f3a"


@pytest.fixture
async def gateway(sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path) -> AsyncIterator[str]:
    settings = batch_settings(tmp_path, max_file_bytes=LIMIT)
    async with gateway_at(sim.base_url, batch=settings, server={"max_upload_bytes": LIMIT}) as url:
        yield url.removesuffix("/v1")


def jsonl_of_size(size: int) -> bytes:
    """Valid batch lines, exactly `size` bytes in all (the last line padded to fit)."""
    lines = [orjson.dumps(line(f"c{i}")) + b"\n" for i in range(size // 200)]
    data = b"".join(lines[:-1])
    last: dict[str, Any] = line(f"c{len(lines)}")
    last["body"]["user"] = ""
    last["body"]["user"] = "p" * (size - len(data) - len(orjson.dumps(last)) - 1)
    data += orjson.dumps(last) + b"\n"
    assert len(data) == size
    return data


def multipart(data: bytes, *, close: bool = True) -> bytes:
    head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n").encode()  # fmt: skip
    tail = f"\r\n--{BOUNDARY}--\r\n".encode() if close else b"\r\n"
    return head + data + tail


async def post(gateway: str, body: bytes, *, boundary: str = BOUNDARY) -> httpx.Response:
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        return await http.post("/v1/files", content=body, headers=headers)


async def test_a_file_of_exactly_the_limit_is_accepted_and_one_byte_more_is_a_413(
    gateway: str,
) -> None:
    exact = await post(gateway, multipart(jsonl_of_size(LIMIT)))
    assert exact.status_code == 200, exact.text
    assert exact.json()["bytes"] == LIMIT
    over = await post(gateway, multipart(jsonl_of_size(LIMIT + 1)))
    assert over.status_code == 413, over.text


async def test_a_body_cut_before_its_closing_boundary_is_refused_and_nothing_is_kept(
    gateway: str, tmp_path: Path
) -> None:
    whole = jsonl_of_size(4000)
    cut = whole[: whole.index(b"\n", 2000) + 1]  # at a line boundary: still valid JSONL
    refused = await post(gateway, multipart(cut, close=False))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_multipart"
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        assert (await http.get("/v1/files")).json()["data"] == []
    assert not any((tmp_path / "files" / "tmp").glob("*.part"))
    # The same file, closed: accepted whole.
    accepted = await post(gateway, multipart(whole))
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["bytes"] == len(whole)


async def test_a_boundary_past_the_rfcs_70_characters_is_a_400(gateway: str) -> None:
    # Found by the multipart fuzz: python-multipart raises past 256 characters, a 500.
    long = "b" * 2000
    body = multipart(jsonl_of_size(1000)).replace(BOUNDARY.encode(), long.encode())
    refused = await post(gateway, body, boundary=long)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_content_type"
