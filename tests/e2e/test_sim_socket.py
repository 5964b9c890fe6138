"""The simulator's HTTP/1.1 behaviour at the socket: keep-alive, pipelining, request framing,
and faults that are real on the wire (a hang sends nothing, a disconnect cuts the body)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator

CHAT = orjson.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
)
STREAM = orjson.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True}
)


@pytest.fixture
async def simulator() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(max_body_bytes=4096)) as handle:
        yield handle


def request(body: bytes, *, path: str = "/v1/chat/completions", extra: str = "") -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


async def connect(sim: SimHandle) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(sim.host, sim.port)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def test_keep_alive_and_pipelined_requests_answer_in_order(simulator: SimHandle) -> None:
    simulator.configure({"latency": {"ttft_ms": 30}})
    reader, writer = await connect(simulator)
    slow = request(CHAT)
    fast = request(b"{broken", extra="")
    writer.write(slow + fast + request(CHAT))
    statuses = [(await read_response(reader))[0] for _ in range(3)]
    assert statuses == [200, 400, 200]
    await close(writer)


async def test_chunked_request_bodies_are_read(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    half = len(CHAT) // 2
    body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, CHAT[:half], len(CHAT) - half, CHAT[half:])
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nTransfer-Encoding: chunked\r\n\r\n"
        + body
    )
    status, headers, payload = await read_response(reader)
    assert status == 200
    assert headers["x-simulated"] == "levergate-sim"
    assert orjson.loads(payload)["usage"]["completion_tokens"] == 3
    await close(writer)


async def test_body_split_across_packets(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    raw = request(CHAT)
    for index in range(0, len(raw), 7):
        writer.write(raw[index : index + 7])
        await writer.drain()
    assert (await read_response(reader))[0] == 200
    await close(writer)


async def test_connection_close_and_http_1_0_are_honoured(simulator: SimHandle) -> None:
    for extra, version in (("Connection: close\r\n", "1.1"), ("", "1.0")):
        reader, writer = await connect(simulator)
        writer.write(request(CHAT, extra=extra).replace(b"HTTP/1.1", f"HTTP/{version}".encode(), 1))
        status, headers, _ = await read_response(reader)
        assert status == 200
        assert headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        await close(writer)


async def test_expect_100_continue(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    raw = request(CHAT, extra="Expect: 100-continue\r\n")
    head, body = raw.split(b"\r\n\r\n", 1)
    writer.write(head + b"\r\n\r\n")
    assert (
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    writer.write(body)
    assert (await read_response(reader))[0] == 200
    await close(writer)


async def test_garbage_gets_400_and_a_closed_connection(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    status, _, body = await read_response(reader)
    assert status == 400
    assert "Malformed HTTP" in orjson.loads(body)["error"]["message"]
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await close(writer)


async def test_too_large_bodies_get_413(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    writer.write(request(b"x" * 5000))
    status, _, _ = await read_response(reader)
    assert status == 413
    await close(writer)


async def test_hang_sends_nothing_until_the_client_leaves(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    writer.write(request(CHAT, extra="x-sim-fault: hang\r\n"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), 0.3)
    assert simulator.stats()["in_flight"] == 1
    await close(writer)
    for _ in range(200):
        if simulator.stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.01)
    assert simulator.stats()["in_flight"] == 0


async def test_stream_disconnect_leaves_an_incomplete_chunked_body(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    writer.write(request(STREAM, extra="x-sim-fault: disconnect\r\n"))
    received = await asyncio.wait_for(reader.read(-1), 5)
    head, body = received.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head
    assert body.count(b"data: ") == 2  # disconnect_after_chunks defaults to 2
    assert b"[DONE]" not in body
    assert not body.endswith(b"0\r\n\r\n")
    await close(writer)


async def test_paced_stream_disconnect_is_cut_too(simulator: SimHandle) -> None:
    simulator.configure(
        {"latency": {"tokens_per_second": 1000}, "faults": {"disconnect_after_chunks": 4}}
    )
    reader, writer = await connect(simulator)
    writer.write(request(STREAM, extra="x-sim-fault: disconnect\r\n"))
    received = await asyncio.wait_for(reader.read(-1), 5)
    assert received.count(b"data: ") == 4
    assert b"[DONE]" not in received
    await close(writer)


async def test_plain_disconnect_sends_less_than_content_length(simulator: SimHandle) -> None:
    reader, writer = await connect(simulator)
    writer.write(request(CHAT, extra="x-sim-fault: disconnect\r\n"))
    received = await asyncio.wait_for(reader.read(-1), 5)
    head, body = received.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    assert 0 < len(body) < length
    await close(writer)


async def test_a_complete_stream_ends_with_done_and_the_last_chunk(simulator: SimHandle) -> None:
    simulator.configure({"latency": {"ttft_ms": 5, "tokens_per_second": 2000}})
    reader, writer = await connect(simulator)
    writer.write(request(STREAM))
    received = b""
    while not received.endswith(b"0\r\n\r\n"):
        received += await asyncio.wait_for(reader.read(4096), 5)
    assert received.count(b"data: ") == 9  # role, 6 tokens, finish, [DONE]
    assert b"data: [DONE]\n\n" in received
    await close(writer)


async def test_closing_the_server_ends_hung_and_streaming_requests(simulator: SimHandle) -> None:
    async with run_simulator(SimSettings(latency=LatencySettings(tokens_per_second=1))) as other:
        reader, writer = await connect(other)
        writer.write(request(CHAT, extra="x-sim-fault: hang\r\n"))
        reader2, writer2 = await connect(other)
        writer2.write(request(STREAM))
        await asyncio.sleep(0.05)
    assert await asyncio.wait_for(reader.read(-1), 5) == b""
    assert b"data: " in await asyncio.wait_for(reader2.read(-1), 5)
    await close(writer)
    await close(writer2)
